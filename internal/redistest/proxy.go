package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/launcher"
)

// Proxy is a TCP proxy in front of a server that can slow down, hang, reset
// or refuse the connections going through it: a Toxiproxy
// (github.com/Shopify/toxiproxy/v2) that internal/testkit's cmd/redisproxy
// runs in a child process (see package internal/launcher), so that this
// module's go.mod does not list Toxiproxy. Package internal/testkit/proxy
// says exactly what each fault does.
//
// Point the client under test at Addr instead of the server. Latency,
// timeout and reset act on the connections already open as well as on new
// ones (except that ResetPeer closes connections open before it with a FIN
// rather than a reset).
type Proxy struct {
	Upstream string // host:port the proxy forwards to

	addr  string
	child *launcher.Child
}

// NewProxy starts a proxy on a free 127.0.0.1 port that forwards every
// connection to upstream (host:port), and closes it and every connection
// through it on t.Cleanup.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), launchTimeout)
	defer cancel()
	child, err := launcher.Start(ctx, "redisproxy", upstream)
	if err != nil {
		t.Fatalf("redistest: proxy to %s: %v", upstream, err)
	}
	t.Cleanup(func() {
		if err := child.Close(); err != nil {
			t.Errorf("redistest: proxy to %s: %v", upstream, err)
		}
	})
	return &Proxy{Upstream: upstream, addr: child.First, child: child}
}

// Addr returns the proxy's host:port on 127.0.0.1. It stays the same across
// Disable and Enable.
func (p *Proxy) Addr() string { return p.addr }

// AddLatency delays every reply from upstream by d (rounded down to whole
// milliseconds), so that each round trip takes d longer. A second call
// replaces the delay.
func (p *Proxy) AddLatency(t testing.TB, d time.Duration) {
	t.Helper()
	p.do(t, "latency "+d.String())
}

// AddCommandLatency delays every command on its way to the server by d
// (rounded down to whole milliseconds): each runs d late, and each round
// trip takes d longer. A second call replaces the delay; it adds to
// AddLatency's.
func (p *Proxy) AddCommandLatency(t testing.TB, d time.Duration) {
	t.Helper()
	p.do(t, "latency-up "+d.String())
}

// AddTimeout stops all data in both directions, as a network that has gone
// silent: connections are accepted and stay open, but nothing reaches
// upstream or comes back. Clear closes the connections hung meanwhile;
// clients must redial.
func (p *Proxy) AddTimeout(t testing.TB) {
	t.Helper()
	p.do(t, "timeout")
}

// ResetPeer makes the proxy drop a connection as soon as the client sends
// anything on it; the command never reaches upstream.
func (p *Proxy) ResetPeer(t testing.TB) {
	t.Helper()
	p.do(t, "reset")
}

// Disable closes the proxy's listener and every connection through it, so
// that new connections are refused, as when the server is down.
func (p *Proxy) Disable(t testing.TB) {
	t.Helper()
	p.do(t, "disable")
}

// Enable undoes Disable: the proxy accepts connections again on Addr. It
// fails the test if the port has been taken meanwhile. Enabling an enabled
// proxy does nothing.
func (p *Proxy) Enable(t testing.TB) {
	t.Helper()
	p.do(t, "enable")
}

// Clear removes every fault and enables the proxy: connections flow
// normally again.
func (p *Proxy) Clear(t testing.TB) {
	t.Helper()
	p.do(t, "clear")
}

func (p *Proxy) do(t testing.TB, command string) {
	t.Helper()
	if err := p.child.Do(command); err != nil {
		t.Fatalf("redistest: proxy on %s: %v", p.addr, err)
	}
}
