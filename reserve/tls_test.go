package reserve_test

import (
	"context"
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
	"strconv"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestTLS: pacer over rediss:// to a redis-server that speaks TLS, with a
// throwaway CA and server certificate made here: reservations, a Wait, a
// pause and a peek.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	caPEM := writeCerts(t, dir)
	port := freePort(t)
	s, err := redisproc.Start(redisproc.Spec{Args: []string{
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", filepath.Join(dir, "server.crt"),
		"--tls-key-file", filepath.Join(dir, "server.key"),
		"--tls-ca-cert-file", filepath.Join(dir, "ca.crt"),
		"--tls-auth-clients", "no",
	}})
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("a redis-server with TLS: %v", err)
		}
		t.Skipf("no redis-server with TLS here: %v", err)
	}
	t.Cleanup(func() { s.Close() })

	opts, err := redis.ParseURL("rediss://127.0.0.1:" + strconv.Itoa(port) + "/0")
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	opts.TLSConfig.RootCAs = roots
	rdb := redis.NewClient(opts) // as the quick start builds it, over TLS
	t.Cleanup(func() { rdb.Close() })

	l, err := reserve.New(rdb, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet, RequireRedis: true, FailClosed: true})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	ctx := context.Background()
	// 1/s: the second reservation comes well within a slot of the first
	// even on a loaded machine (at 1,000/s a 3.9 ms stall between the two
	// calls let the bucket refill, and the test failed).
	lim := reserve.Limit{Rate: 1, Burst: 1}
	r1, err := l.Reserve(ctx, "tls", lim)
	require.NoError(t, err)
	r2, err := l.Reserve(ctx, "tls", lim)
	require.NoError(t, err)
	require.False(t, r1.Local() || r2.Local(), "granted by Redis")
	s1, _ := reserve.ServerSlot(r1)
	s2, _ := reserve.ServerSlot(r2)
	require.Equal(t, int64(time.Second), s2-s1, "the slots Redis granted, 1/rate apart")
	require.NoError(t, l.Wait(ctx, "tls", lim))
	// A pause of a minute, so that the Peek after it finds it in force
	// however slow the machine (a pause of 50 ms had ended by the Peek in a
	// quiet fresh-clone CI run), and no Wait after it.
	require.NoError(t, l.Pause(ctx, "tls", time.Minute))
	st, err := l.Peek(ctx, reserve.Single("tls", lim, 1))
	require.NoError(t, err)
	require.Positive(t, st.Paused, "paused")
}

// writeCerts writes ca.crt, server.crt and server.key (for 127.0.0.1) to
// dir and returns the CA's PEM.
func writeCerts(t *testing.T, dir string) []byte {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		return k
	}
	caKey, srvKey := key(), key()
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pacer test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	srv := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, caCert, &srvKey.PublicKey, caKey)
	require.NoError(t, err)
	srvKeyDER, err := x509.MarshalECPrivateKey(srvKey)
	require.NoError(t, err)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	for name, data := range map[string][]byte{
		"ca.crt":     caPEM,
		"server.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}),
		"server.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: srvKeyDER}),
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o600))
	}
	return caPEM
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
