package redistest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxy is a TCP proxy in front of a server, run in the test process with
// Toxiproxy (github.com/Shopify/toxiproxy/v2) as a library, that can slow
// down, hang, reset or refuse the connections going through it.
//
// Point the client under test at Addr instead of the server. Latency,
// timeout and reset toxics act on the connections already open as well as
// on new ones, except where a method's comment says otherwise.
type Proxy struct {
	Upstream string // host:port the proxy forwards to

	addr  string
	mu    sync.Mutex // serialises changes to the toxics
	proxy *toxiproxy.Proxy
}

// NewProxy starts a proxy on a free 127.0.0.1 port that forwards every
// connection to upstream (host:port), and closes it and every connection
// through it on t.Cleanup.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	px := toxiproxy.NewProxy(server, "redistest-"+upstream, "127.0.0.1:0", upstream)
	if err := px.Start(); err != nil {
		t.Fatalf("redistest: proxy to %s: %v", upstream, err)
	}
	t.Cleanup(px.Stop)
	return &Proxy{Upstream: upstream, addr: px.Listen, proxy: px}
}

// Addr returns the proxy's host:port on 127.0.0.1. It stays the same across
// Disable and Enable.
func (p *Proxy) Addr() string { return p.addr }

// AddLatency delays every reply from upstream by d (rounded down to whole
// milliseconds), so that each round trip takes d longer. A second call
// replaces the delay.
func (p *Proxy) AddLatency(t testing.TB, d time.Duration) {
	t.Helper()
	p.setToxic(t, "latency", "latency", "downstream", map[string]any{"latency": d.Milliseconds()}, true)
}

// AddTimeout stops all data in both directions, as a network that has gone
// silent: connections are still accepted and stay open, but commands never
// reach upstream and nothing comes back, so clients hang until their own
// timeouts. When the toxic is removed again (Clear), Toxiproxy closes the
// connections that were open while it was in place; clients must redial.
func (p *Proxy) AddTimeout(t testing.TB) {
	t.Helper()
	for _, stream := range []string{"upstream", "downstream"} {
		p.setToxic(t, "timeout_"+stream, "timeout", stream, map[string]any{"timeout": 0}, false)
	}
}

// ResetPeer makes the proxy drop a connection as soon as the client sends
// anything on it; the command never reaches upstream. New connections are
// reset (TCP RST, "connection reset by peer"); on connections that were open
// before the call Toxiproxy cannot set SO_LINGER, so they are closed with a
// FIN instead and the client sees EOF. Idle connections stay open until used.
// go-redis with RESP3 (its default) may report a reset during its connection
// handshake as EOF too.
func (p *Proxy) ResetPeer(t testing.TB) {
	t.Helper()
	p.setToxic(t, "reset_peer", "reset_peer", "upstream", map[string]any{"timeout": 0}, false)
}

// Disable closes the proxy's listener and every connection through it, so
// that new connections are refused, as when the server is down. Enable
// listens again on the same address.
func (p *Proxy) Disable(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.proxy.Stop()
}

// Enable undoes Disable: the proxy accepts connections again on Addr. It
// fails the test if the port has been taken meanwhile. Enabling an enabled
// proxy does nothing.
func (p *Proxy) Enable(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.enable(t)
}

func (p *Proxy) enable(t testing.TB) {
	t.Helper()
	if err := p.proxy.Start(); err != nil && !errors.Is(err, toxiproxy.ErrProxyAlreadyStarted) {
		t.Fatalf("redistest: enable proxy on %s: %v", p.addr, err)
	}
}

// Clear removes every toxic and enables the proxy: connections flow
// normally again. Connections hung by AddTimeout are closed by it (see
// AddTimeout); others are kept.
func (p *Proxy) Clear(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.proxy.Toxics.ResetToxics(context.Background())
	p.enable(t)
}

// setToxic adds the toxic name of type typ on stream ("upstream": client to
// server, "downstream": server to client) to every connection. If it is
// already there, it is replaced when replace is set and kept otherwise.
// (Toxiproxy's own update of a running toxic's attributes is a data race.)
func (p *Proxy) setToxic(t testing.TB, name, typ, stream string, attrs map[string]any, replace bool) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proxy.Toxics.GetToxic(name) != nil {
		if !replace {
			return
		}
		if err := p.proxy.Toxics.RemoveToxic(context.Background(), name); err != nil {
			t.Fatalf("redistest: remove toxic %s from proxy %s: %v", name, p.addr, err)
		}
	}
	body, err := json.Marshal(map[string]any{
		"name": name, "type": typ, "stream": stream, "toxicity": 1, "attributes": attrs,
	})
	if err != nil {
		t.Fatalf("redistest: toxic %s: %v", name, err)
	}
	if _, err := p.proxy.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
		t.Fatalf("redistest: toxic %s on proxy %s: %v", name, p.addr, err)
	}
}
