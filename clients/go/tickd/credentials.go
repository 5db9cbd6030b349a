package tickd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// bearerToken sends tickd's `authorization: Bearer TOKEN` metadata on every call, streams
// included. It does not insist on TLS, since tickd behind a TLS-terminating proxy or on
// loopback is a real deployment; send tokens over TLS where the network is not trusted.
type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (bearerToken) RequireTransportSecurity() bool { return false }

// transportOption is TLS from files or a given configuration, else a plain connection
// (grpc-go 1.33 has no credentials/insecure package yet, hence WithInsecure).
func transportOption(options *clientOptions) (grpc.DialOption, error) {
	if options.tlsConfig != nil {
		return grpc.WithTransportCredentials(credentials.NewTLS(options.tlsConfig)), nil
	}
	if options.tls == nil {
		return grpc.WithInsecure(), nil
	}
	config, err := loadTLSConfig(*options.tls)
	if err != nil {
		return nil, err
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(config)), nil
}

// loadTLSConfig reads the PEM files named by files.
func loadTLSConfig(files TLS) (*tls.Config, error) {
	config := &tls.Config{ServerName: files.ServerName, MinVersion: tls.VersionTLS12}
	if files.CAFile != "" {
		pem, err := os.ReadFile(files.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tickd: reading the CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tickd: no PEM certificate in the CA file %s", files.CAFile)
		}
		config.RootCAs = pool
	}
	if files.CertFile != "" || files.KeyFile != "" {
		certificate, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tickd: reading the client certificate: %w", err)
		}
		config.Certificates = []tls.Certificate{certificate}
	}
	return config, nil
}
