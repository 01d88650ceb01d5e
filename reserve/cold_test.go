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
// key that contains mark, its name: the commands sent for those keys,
// alone or in pipelines (a Limiter pipelines the script calls made while
// one of its calls is in flight). Those sent in pipelines are also in
// piped, and each pipeline that carried a script call naming mark adds
// their number to sizes; any other command of a pipeline naming mark is
// recorded under "pipeline".
type keyCommands struct {
	passHook
	mark  string
	mu    sync.Mutex
	cmds  map[string][]string // by key
	piped map[string][]string // by key, those sent in pipelines
	sizes []int
}

func newKeyCommands(mark string) *keyCommands {
	return &keyCommands{mark: mark, cmds: map[string][]string{}, piped: map[string][]string{}}
}

// commandKey returns the key a command names: a script call's first key,
// else its first argument.
func commandKey(cmd redis.Cmder) string {
	if key, ok := scriptKey(cmd); ok {
		return key
	}
	if args := cmd.Args(); len(args) > 1 {
		return fmt.Sprint(args[1])
	}
	return ""
}

func (h *keyCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if key := commandKey(cmd); strings.Contains(key, h.mark) {
			h.mu.Lock()
			h.cmds[key] = append(h.cmds[key], strings.ToLower(cmd.Name()))
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *keyCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		h.mu.Lock()
		for _, c := range cmds {
			if !strings.Contains(fmt.Sprint(c.Args()), h.mark) {
				continue
			}
			name := strings.ToLower(c.Name())
			key, ok := scriptKey(c)
			if !ok {
				h.cmds["pipeline"] = append(h.cmds["pipeline"], name)
				continue
			}
			h.cmds[key] = append(h.cmds[key], name)
			h.piped[key] = append(h.piped[key], name)
			n++
		}
		if n > 0 {
			h.sizes = append(h.sizes, n)
		}
		h.mu.Unlock()
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
	h := newKeyCommands("{cold")
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
