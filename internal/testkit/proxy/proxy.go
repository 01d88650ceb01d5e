// Package proxy puts a TCP proxy in front of a server, run in this process
// with Toxiproxy (github.com/Shopify/toxiproxy/v2) as a library, that can
// slow down, hang, reset or refuse the connections going through it.
//
// The root module's tests use it through cmd/redisproxy and
// internal/redistest.NewProxy, so that the library's go.mod does not list
// Toxiproxy.
package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxy is a TCP proxy in front of a server. Latency, timeout and reset
// toxics act on the connections already open as well as on new ones,
// except where a method's comment says otherwise.
type Proxy struct {
	Upstream string // host:port the proxy forwards to

	addr  string
	mu    sync.Mutex // serialises changes to the toxics
	proxy *toxiproxy.Proxy
}

// New starts a proxy on a free 127.0.0.1 port that forwards every
// connection to upstream (host:port). Close it when done.
func New(upstream string) (*Proxy, error) {
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	px := toxiproxy.NewProxy(server, "redistest-"+upstream, "127.0.0.1:0", upstream)
	if err := px.Start(); err != nil {
		return nil, fmt.Errorf("proxy to %s: %w", upstream, err)
	}
	return &Proxy{Upstream: upstream, addr: px.Listen, proxy: px}, nil
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.proxy.Stop()
}

// Addr returns the proxy's host:port on 127.0.0.1. It stays the same across
// Disable and Enable.
func (p *Proxy) Addr() string { return p.addr }

// AddLatency delays every reply from upstream by d (rounded down to whole
// milliseconds), so that each round trip takes d longer. A second call
// replaces the delay.
func (p *Proxy) AddLatency(d time.Duration) error {
	return p.setToxic("latency", "latency", "downstream", map[string]any{"latency": d.Milliseconds()}, true)
}

// AddCommandLatency delays every command on its way to upstream by d
// (rounded down to whole milliseconds): each runs d late, and each round
// trip takes d longer. A second call replaces the delay; it adds to
// AddLatency's.
func (p *Proxy) AddCommandLatency(d time.Duration) error {
	return p.setToxic("latency_up", "latency", "upstream", map[string]any{"latency": d.Milliseconds()}, true)
}

// AddTimeout stops all data in both directions, as a network that has gone
// silent: connections are still accepted and stay open, but commands never
// reach upstream and nothing comes back, so clients hang until their own
// timeouts. When the toxic is removed again (Clear), Toxiproxy closes the
// connections that were open while it was in place; clients must redial.
func (p *Proxy) AddTimeout() error {
	for _, stream := range []string{"upstream", "downstream"} {
		if err := p.setToxic("timeout_"+stream, "timeout", stream, map[string]any{"timeout": 0}, false); err != nil {
			return err
		}
	}
	return nil
}

// ResetPeer makes the proxy drop a connection as soon as the client sends
// anything on it; the command never reaches upstream. New connections are
// reset (TCP RST, "connection reset by peer"); on connections that were open
// before the call Toxiproxy cannot set SO_LINGER, so they are closed with a
// FIN instead and the client sees EOF. Idle connections stay open until used.
// go-redis with RESP3 (its default) may report a reset during its connection
// handshake as EOF too.
func (p *Proxy) ResetPeer() error {
	return p.setToxic("reset_peer", "reset_peer", "upstream", map[string]any{"timeout": 0}, false)
}

// Disable closes the proxy's listener and every connection through it, so
// that new connections are refused, as when the server is down. Enable
// listens again on the same address.
func (p *Proxy) Disable() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.proxy.Stop()
}

// Enable undoes Disable: the proxy accepts connections again on Addr. It
// fails if the port has been taken meanwhile. Enabling an enabled proxy
// does nothing.
func (p *Proxy) Enable() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.enable()
}

func (p *Proxy) enable() error {
	if err := p.proxy.Start(); err != nil && !errors.Is(err, toxiproxy.ErrProxyAlreadyStarted) {
		return fmt.Errorf("enable proxy on %s: %w", p.addr, err)
	}
	return nil
}

// Clear removes every toxic and enables the proxy: connections flow
// normally again. Connections hung by AddTimeout are closed by it (see
// AddTimeout); others are kept.
func (p *Proxy) Clear() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.proxy.Toxics.ResetToxics(context.Background())
	return p.enable()
}

// setToxic adds the toxic name of type typ on stream ("upstream": client to
// server, "downstream": server to client) to every connection. If it is
// already there, it is replaced when replace is set and kept otherwise.
// (Toxiproxy's own update of a running toxic's attributes is a data race.)
func (p *Proxy) setToxic(name, typ, stream string, attrs map[string]any, replace bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proxy.Toxics.GetToxic(name) != nil {
		if !replace {
			return nil
		}
		if err := p.proxy.Toxics.RemoveToxic(context.Background(), name); err != nil {
			return fmt.Errorf("remove toxic %s from proxy %s: %w", name, p.addr, err)
		}
	}
	body, err := json.Marshal(map[string]any{
		"name": name, "type": typ, "stream": stream, "toxicity": 1, "attributes": attrs,
	})
	if err != nil {
		return fmt.Errorf("toxic %s: %w", name, err)
	}
	if _, err := p.proxy.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
		return fmt.Errorf("toxic %s on proxy %s: %w", name, p.addr, err)
	}
	return nil
}
