package tickd_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testPKI is a throw-away certificate authority with a server certificate for 127.0.0.1
// and a client certificate, written as PEM files (made with crypto/x509, so the tests
// need no openssl).
type testPKI struct {
	CAFile, ServerCertFile, ServerKeyFile, ClientCertFile, ClientKeyFile string
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, caCert := issue(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "tickd test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil, nil)
	serverKey, serverCert := issue(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "127.0.0.1"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames: []string{"localhost"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}, caCert, caKey)
	clientKey, clientCert := issue(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "go client"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}, caCert, caKey)
	pki := testPKI{
		CAFile: filepath.Join(dir, "ca.pem"), ServerCertFile: filepath.Join(dir, "server.pem"),
		ServerKeyFile: filepath.Join(dir, "server.key"), ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile: filepath.Join(dir, "client.key"),
	}
	writePEM(t, pki.CAFile, "CERTIFICATE", caCert.Raw)
	writePEM(t, pki.ServerCertFile, "CERTIFICATE", serverCert.Raw)
	writePEM(t, pki.ServerKeyFile, "PRIVATE KEY", marshalKey(t, serverKey))
	writePEM(t, pki.ClientCertFile, "CERTIFICATE", clientCert.Raw)
	writePEM(t, pki.ClientKeyFile, "PRIVATE KEY", marshalKey(t, clientKey))
	return pki
}

var serialNumber int64

// issue makes a key and a certificate from template, signed by parent (self-signed if nil).
func issue(t *testing.T, template, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serialNumber++
	template.SerialNumber = big.NewInt(serialNumber)
	template.NotBefore, template.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	if parent == nil {
		parent, parentKey = template, key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	certificate, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, certificate
}

func marshalKey(t *testing.T, key *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
