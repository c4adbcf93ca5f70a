package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
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

// TLSFiles are a throwaway certificate authority and a server certificate
// it signed, as PEM files, for a TLS-only redis-server.
type TLSFiles struct {
	CAFile   string // the CA certificate, for redis.tls_ca_file
	CertFile string // the server certificate
	KeyFile  string // the server's private key
	// ServerName is the DNS name in the server certificate; 127.0.0.1 is
	// in it too.
	ServerName string
}

// WriteTLSFiles creates a fresh CA and a server certificate for 127.0.0.1
// and serverName, valid for an hour, in a temporary directory.
func WriteTLSFiles(t testing.TB, serverName string) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("CA key: %v", err)
	}
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "delay-queue test CA"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("CA certificate: %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("parse CA certificate: %v", err)
	}

	serverKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("server key: %v", err)
	}
	serverTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: serverName},
		DNSNames:     []string{serverName},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		// Client authentication too: cluster nodes present it to each
		// other on the TLS cluster bus, which always checks it.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	serverDER, err := x509.CreateCertificate(rand.Reader, serverTemplate, ca, &serverKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("server certificate: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(serverKey)
	if err != nil {
		t.Fatalf("marshal server key: %v", err)
	}

	files := TLSFiles{
		CAFile:     filepath.Join(dir, "ca.pem"),
		CertFile:   filepath.Join(dir, "server.pem"),
		KeyFile:    filepath.Join(dir, "server-key.pem"),
		ServerName: serverName,
	}
	writePEM(t, files.CAFile, "CERTIFICATE", caDER)
	writePEM(t, files.CertFile, "CERTIFICATE", serverDER)
	writePEM(t, files.KeyFile, "PRIVATE KEY", keyDER)
	return files
}

func writePEM(t testing.TB, path, blockType string, der []byte) {
	t.Helper()
	data := pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}

// ClientConfig returns TLS settings that trust only the files' CA.
func (f TLSFiles) ClientConfig(t testing.TB) *tls.Config {
	t.Helper()
	data, err := os.ReadFile(f.CAFile)
	if err != nil {
		t.Fatalf("read CA: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(data) {
		t.Fatalf("no certificate in %s", f.CAFile)
	}
	return &tls.Config{RootCAs: roots, ServerName: f.ServerName, MinVersion: tls.VersionTLS12}
}

// StartTLS runs a redis-server that accepts TLS connections only (port 0,
// tls-port on a free port) with the files' server certificate and no client
// certificates required. extra holds more config directives.
func StartTLS(t testing.TB, files TLSFiles, extra ...string) *Server {
	t.Helper()
	conf := append([]string{
		"tls-cert-file " + files.CertFile,
		"tls-key-file " + files.KeyFile,
		"tls-ca-cert-file " + files.CAFile,
		"tls-auth-clients no",
	}, extra...)
	return startServer(t, files.ClientConfig(t), conf)
}
