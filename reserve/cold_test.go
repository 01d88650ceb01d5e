package reserve_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// keyCommands is a go-redis hook that records, for each command naming a
// key that contains mark, its name: the round trips made for those keys.
type keyCommands struct {
	passHook
	mark string
	mu   sync.Mutex
	cmds map[string][]string // by key
}

func (h *keyCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		key := ""
		switch name := strings.ToLower(cmd.Name()); {
		case (name == "evalsha" || name == "eval") && len(args) > 3:
			key = fmt.Sprint(args[3])
		case len(args) > 1:
			key = fmt.Sprint(args[1])
		}
		if strings.Contains(key, h.mark) {
			h.mu.Lock()
			h.cmds[key] = append(h.cmds[key], strings.ToLower(cmd.Name()))
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook records a pipeline's script calls by key, as if each
// had gone alone (a Limiter pipelines the calls made while one is in
// flight), and any other command naming mark as "pipeline".
func (h *keyCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			key, ok := scriptKey(c)
			if !ok {
				key = "pipeline"
			}
			if strings.Contains(fmt.Sprint(c.Args()), h.mark) {
				h.mu.Lock()
				h.cmds[key] = append(h.cmds[key], strings.ToLower(c.Name()))
				h.mu.Unlock()
			}
		}
		return next(ctx, cmds)
	}
}

// slowTracer's Waits take 2 ms between their reply and their sleep (a GC
// pause, a busy machine), longer than a reply stands for a pause check
// made at any time (checkShare).
type slowTracer struct{}

func (slowTracer) StartWait(ctx context.Context, _ string) (context.Context, reserve.WaitTrace) {
	return ctx, slowTrace{}
}

type slowTrace struct{}

func (slowTrace) Reserved(*reserve.Reservation)                { time.Sleep(2 * time.Millisecond) }
func (slowTrace) Sleeping(*reserve.Reservation, time.Duration) {}
func (slowTrace) Moved(*reserve.Reservation, string)           {}
func (slowTrace) End(error, time.Duration)                     {}

// TestColdKeysRoundTrips: on cold keys (each called now and then, no
// pause, the crawler's shape) a Wait whose slot is now makes exactly one
// round trip, its script's EVALSHA, however long its reply takes to reach
// its sleep (the reply ran after the moment of the slot's pause check, and
// stands for it); a Wait that sleeps to its slot (0.5 s ahead) makes its
// EVALSHA and one pause check (a GET, PreciseWake before the slot: a pause
// another process made meanwhile would hold it), and nothing else. Counted
// with a go-redis hook on the client New uses as it is (set up as pacer
// needs it). On a busy machine no sleeper takes a fresh slot for waking
// late (MaxLateness -1), and no call is sent again for being slow
// (CallTimeout a minute).
func TestColdKeysRoundTrips(t *testing.T) {
	s := redistest.New(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	h := &keyCommands{mark: "{cold", cmds: map[string][]string{}}
	rdb.AddHook(h)
	l, err := reserve.New(rdb, reserve.Options{RequireRedis: true, MaxLateness: -1, CallTimeout: time.Minute, Tracer: slowTracer{}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	lim := reserve.Limit{Rate: 2, Burst: 1}
	// The script loaded (its first use may be EVALSHA, NOSCRIPT, EVAL).
	if err := l.Wait(ctx, "warm", lim); err != nil {
		t.Fatal(err)
	}
	const keys = 50
	var wg sync.WaitGroup
	for i := range keys {
		key := fmt.Sprintf("cold%d", i)
		wg.Go(func() {
			// The first call's slot is now; the second's 0.5 s ahead.
			for range 2 {
				if err := l.Wait(ctx, key, lim); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.cmds) != keys {
		t.Errorf("commands on %d keys (%v); want %d keys", len(h.cmds), h.cmds, keys)
	}
	for key, cmds := range h.cmds {
		if got := strings.Join(cmds, " "); got != "evalsha evalsha get" {
			t.Errorf("%s: %s; want evalsha (the Wait at once), evalsha get (the Wait that slept, its pause check)", key, got)
		}
	}
}
