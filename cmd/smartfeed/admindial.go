package main

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// adminDial is how the admin commands (smartfeed hedge, smartfeed shards move) reach a
// process's admin ports: the bearer token to present, and the CA and server name to verify the
// ports' TLS certificate with (no CA: plaintext, as a loopback admin port without a certificate
// serves).
type adminDial struct {
	tokenFile, caFile, serverName string
}

// tlsConfig is the client TLS configuration, nil for plaintext.
func (d adminDial) tlsConfig() (*tls.Config, error) {
	if d.caFile == "" {
		return nil, nil
	}
	pool, err := loadPool(d.caFile)
	if err != nil {
		return nil, fmt.Errorf("admin CA (--admin-ca-file): %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: d.serverName}, nil
}

// grpc dials the admin gRPC port at addr.
func (d adminDial) grpc(addr string) (*grpc.ClientConn, error) {
	cfg, err := d.tlsConfig()
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if cfg != nil {
		creds = credentials.NewTLS(cfg)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if d.tokenFile != "" {
		b, err := os.ReadFile(d.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("admin token: %w", err)
		}
		opts = append(opts, grpc.WithPerRPCCredentials(bearerCreds(strings.TrimSpace(string(b)))))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return conn, nil
}

// http returns the client and the URL of path on the admin HTTP port at addr (https when the
// CA is given).
func (d adminDial) http(addr, path string) (*http.Client, string, error) {
	cfg, err := d.tlsConfig()
	if err != nil {
		return nil, "", err
	}
	if cfg == nil {
		return http.DefaultClient, "http://" + addr + path, nil
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}, "https://" + addr + path, nil
}

// explain adds the likely fix to a call's error: an admin port that serves TLS closes a
// plaintext connection at once ("error reading server preface"), which says nothing of TLS.
func (d adminDial) explain(err error) error {
	if err == nil || d.caFile != "" || status.Code(err) != codes.Unavailable {
		return err
	}
	return fmt.Errorf("%w (if the admin port serves TLS, pass its CA with --admin-ca-file)", err)
}
