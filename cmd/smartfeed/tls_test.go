package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/testenv"
)

// testCA is a throwaway certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a certificate for 127.0.0.1 (serial given) and its key into dir.
func (ca *testCA) issue(t *testing.T, dir, name string, serial int64) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestTLSListeners: with a certificate configured, the public gRPC port, the admin gRPC port
// and the admin HTTP port speak TLS only; a rotated certificate is served without a restart;
// with a client CA, a client without a certificate is refused (mTLS); off loopback, plaintext
// needs --insecure.
func TestTLSListeners(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := ca.issue(t, dir, "server", 100)
	clientCert, clientKey := ca.issue(t, dir, "client", 200)
	a, _ := startAllWith(t, func(c *config.Config) {
		c.TLS.CertFile, c.TLS.KeyFile = certFile, keyFile
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	check := func(addr string, creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: livenessService})
		return err
	}
	tlsCreds := credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	for name, addr := range map[string]string{"public": a.grpcAddr(), "admin": a.adminGRPCAddr()} {
		if err := check(addr, tlsCreds); err != nil {
			t.Errorf("%s gRPC over TLS: %v", name, err)
		}
		if err := check(addr, insecure.NewCredentials()); err == nil {
			t.Errorf("%s gRPC answered plaintext", name)
		}
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 5 * time.Second}
	resp, err := hc.Get("https://" + a.adminAddr() + "/healthz")
	if err != nil {
		t.Fatalf("admin HTTP over TLS: %v", err)
	}
	resp.Body.Close()

	// Rotation: a new certificate in the same files is served to new connections.
	serial := func() int64 {
		c, err := tls.Dial("tcp", a.grpcAddr(), &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if s := serial(); s != 100 {
		t.Fatalf("serial %d, want 100", s)
	}
	ca.issue(t, dir, "server", 101)
	later := time.Now().Add(2 * time.Second)
	_ = os.Chtimes(certFile, later, later)
	_ = os.Chtimes(keyFile, later, later)
	// The reloader looks at the files at most once a second: the wait covers that too.
	testenv.WaitFor(t, testenv.WaitTimeout, "the rotated certificate to be served", func() bool { return serial() == 101 })

	// mTLS: a client CA makes the port require a client certificate.
	b, _ := startAllWith(t, func(c *config.Config) {
		c.TLS.CertFile, c.TLS.KeyFile, c.TLS.ClientCAFile = certFile, keyFile, caFile
	})
	if err := check(b.grpcAddr(), tlsCreds); err == nil {
		t.Error("mTLS: a client without a certificate got in")
	}
	cc, err := tls.LoadX509KeyPair(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := check(b.grpcAddr(), credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cc}})); err != nil {
		t.Errorf("mTLS with a client certificate: %v", err)
	}

	// Off loopback: plaintext (or no authentication) needs --insecure.
	cfg := testConfig(t)
	cfg.GRPC.Addr = "0.0.0.0:0"
	if _, err := newApp(t.Context(), roleAll, cfg, zap.NewNop(), newRegistry()); err == nil {
		t.Error("plaintext without authentication on 0.0.0.0 started")
	}
	cfg.Auth.Insecure = true
	c, err := newApp(t.Context(), roleAll, cfg, zap.NewNop(), newRegistry())
	if err != nil {
		t.Errorf("--insecure on 0.0.0.0: %v", err)
	} else {
		c.closeAll()
	}
}

// TestAdminCommandsOverTLS: `smartfeed hedge` reaches an admin port that serves TLS (as every
// admin port off loopback must) with --admin-ca-file, over gRPC (show) and over the admin HTTP
// port's /metrics (suggest), verifying the certificate for --admin-server-name; without the CA
// it fails, naming the flag to set.
func TestAdminCommandsOverTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := ca.issue(t, dir, "server", 100)
	a, _ := startAllWith(t, func(c *config.Config) {
		c.TLS.CertFile, c.TLS.KeyFile = certFile, keyFile
	})
	hedgeCmd := func(extra ...string) (string, error) {
		var out bytes.Buffer
		args := append(extra, "--admin-grpc-addr", a.adminGRPCAddr(), "--admin-addr", a.adminAddr(), "--timeout", "5s")
		err := run(t.Context(), args, &out, io.Discard)
		return out.String(), err
	}
	if out, err := hedgeCmd("hedge", "show"); err == nil {
		t.Errorf("hedge show in plaintext against a TLS admin port succeeded:\n%s", out)
	} else if !strings.Contains(err.Error(), "--admin-ca-file") {
		t.Errorf("hedge show in plaintext: %v; want the error to name --admin-ca-file", err)
	}
	if out, err := hedgeCmd("hedge", "show", "--admin-ca-file", caFile); err != nil {
		t.Errorf("hedge show over TLS: %v", err)
	} else if !strings.Contains(out, "cutoff in use") {
		t.Errorf("hedge show over TLS printed no policy:\n%s", out)
	}
	if _, err := hedgeCmd("hedge", "show", "--admin-ca-file", caFile, "--admin-server-name", "not-the-server"); err == nil {
		t.Error("hedge show verified the certificate for a name it does not carry")
	}
	if out, err := hedgeCmd("hedge", "suggest", "--admin-ca-file", caFile); err != nil {
		t.Errorf("hedge suggest over TLS (scrapes https /metrics): %v", err)
	} else if out == "" {
		t.Error("hedge suggest over TLS printed nothing")
	}
}
