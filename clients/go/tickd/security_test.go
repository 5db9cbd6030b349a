package tickd_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tickd/tickd/clients/go/tickd"
)

func TestBearerToken(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("go-secret-token go-auth\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	server := startTickd(t, "--auth-token-file", tokens)
	spec := tickd.TimerSpec{Key: "authorized", Delay: time.Hour}

	anonymous := server.dial(t, tickd.WithNamespace("go-auth"))
	_, err := anonymous.Register(testContext(t), spec)
	assertCode(t, err, codes.Unauthenticated)

	authorized := server.dial(t, tickd.WithNamespace("go-auth"), tickd.WithToken("go-secret-token"))
	if _, err := authorized.Register(testContext(t), spec); err != nil {
		t.Fatalf("with the token: %v", err)
	}
	_, err = authorized.InNamespace("elsewhere").Register(testContext(t), spec)
	assertCode(t, err, codes.PermissionDenied)

	// A subscriber refused for good says so instead of retrying forever.
	refused := anonymous.NewSubscriber(func(context.Context, *tickd.Expiration) error { return nil }, tickd.SubscriberOptions{})
	assertCode(t, refused.Run(testContext(t)), codes.Unauthenticated)
	refusedKeeper := anonymous.NewLeaseKeeper(tickd.LeaseKeeperOptions{})
	refusedKeeper.Add(tickd.ByKey("anything"), time.Minute)
	assertCode(t, refusedKeeper.Run(testContext(t)), codes.Unauthenticated)

	// Streams carry the token too.
	renewed := make(chan tickd.LeaseRenewed, 10)
	keeper := authorized.NewLeaseKeeper(tickd.LeaseKeeperOptions{OnRenewed: func(r tickd.LeaseRenewed) { renewed <- r }})
	registerAll(t, authorized, tickd.TimerSpec{Key: "lease", TTL: 30 * time.Second})
	keeper.Add(tickd.ByKey("lease"), 30*time.Second)
	runInBackground(t, keeper.Run, keeper.Stop)
	await(t, "a heartbeat with the token", renewed)
}

func TestTLSWithCAAndClientCertificate(t *testing.T) {
	pki := newTestPKI(t)
	server := startTickd(t, "--tls-cert", pki.ServerCertFile, "--tls-key", pki.ServerKeyFile, "--tls-client-ca", pki.CAFile)
	spec := tickd.TimerSpec{Key: "over-tls", Delay: time.Hour}

	mutual := server.dial(t, tickd.WithTLS(tickd.TLS{CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}))
	if _, err := mutual.Register(testContext(t), spec); err != nil {
		t.Fatalf("with the CA and a client certificate: %v", err)
	}
	withoutCertificate := server.dial(t, tickd.WithTLS(tickd.TLS{CAFile: pki.CAFile}), tickd.WithRetry(tickd.RetryPolicy{MaxAttempts: 1}))
	_, err := withoutCertificate.Get(testContext(t), tickd.ByKey("over-tls"))
	assertCode(t, err, codes.Unavailable)
	plain := server.dial(t, tickd.WithRetry(tickd.RetryPolicy{MaxAttempts: 1}))
	_, err = plain.Get(testContext(t), tickd.ByKey("over-tls"))
	assertCode(t, err, codes.Unavailable)
}

func TestTLSWithCAOnly(t *testing.T) {
	pki := newTestPKI(t)
	server := startTickd(t, "--tls-cert", pki.ServerCertFile, "--tls-key", pki.ServerKeyFile)
	client := server.dial(t, tickd.WithTLS(tickd.TLS{CAFile: pki.CAFile}))
	if _, err := client.Register(testContext(t), tickd.TimerSpec{Key: "ca-only", Delay: time.Hour}); err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	untrusting := server.dial(t, tickd.WithTLS(tickd.TLS{}), tickd.WithRetry(tickd.RetryPolicy{MaxAttempts: 1}))
	_, err := untrusting.Get(testContext(t), tickd.ByKey("ca-only"))
	assertCode(t, err, codes.Unavailable)
}
