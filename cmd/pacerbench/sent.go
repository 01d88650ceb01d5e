package main

import (
	"context"
	"maps"
	"net"
	"sync"

	"github.com/redis/go-redis/v9"
)

// sent is what the limiters' clients sent Redis: counted on the client side,
// because INFO commandstats also counts (and times twice) the commands that
// scripts and transactions run inside EVALSHA and EXEC.
type sent struct {
	Trips int64 // round trips: a command, or a pipeline or transaction
	// Commands counts the commands sent outside MULTI ... EXEC, by name
	// (go-redis's Cmder.Name: lower case, no subcommand).
	Commands map[string]int64
	// Queued counts the commands sent between MULTI and EXEC.
	Queued int64
}

// total is every command sent.
func (s sent) total() int64 {
	n := s.Queued
	for _, c := range s.Commands {
		n += c
	}
	return n
}

// add adds t to s.
func (s *sent) add(t sent) {
	s.Trips += t.Trips
	s.Queued += t.Queued
	if s.Commands == nil {
		s.Commands = map[string]int64{}
	}
	for k, v := range t.Commands {
		s.Commands[k] += v
	}
}

// handshake are the commands go-redis sends on every new connection: not
// the limiters' work.
var handshake = map[string]bool{"hello": true, "client": true, "auth": true, "select": true}

// counter is a go-redis hook that counts what its client sends, but for the
// connection handshakes.
type counter struct {
	mu sync.Mutex
	s  sent
}

var _ redis.Hook = (*counter)(nil)

func newCounter() *counter { return &counter{s: sent{Commands: map[string]int64{}}} }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if handshake[cmd.Name()] {
			return next(ctx, cmd)
		}
		c.mu.Lock()
		c.s.Trips++
		c.s.Commands[cmd.Name()]++
		c.mu.Unlock()
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook sees pipelines and transactions; a transaction's
// commands come wrapped in MULTI and EXEC.
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.mu.Lock()
		c.s.Trips++
		inTx := false
		for _, cmd := range cmds {
			switch name := cmd.Name(); {
			case name == "multi":
				inTx = true
				c.s.Commands[name]++
			case name == "exec":
				inTx = false
				c.s.Commands[name]++
			case inTx:
				c.s.Queued++
			default:
				c.s.Commands[name]++
			}
		}
		c.mu.Unlock()
		return next(ctx, cmds)
	}
}

// take returns what was sent since the last take.
func (c *counter) take() sent {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.s
	s.Commands = maps.Clone(s.Commands)
	c.s = sent{Commands: map[string]int64{}}
	return s
}
