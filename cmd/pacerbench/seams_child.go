package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	fleetproc "github.com/pacer-go/pacer/internal/fleet"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// seamsChildEnv carries a seams child's job (see package internal/fleet).
const seamsChildEnv = "PACERBENCH_SEAMS_CHILD"

// How a seams child calls pacer.
const (
	callWait    = "wait"    // Limiter.Wait on Limit{Rate, Burst}
	callReserve = "reserve" // Limiter.Reserve, then Reservation.Sleep: Local tells where the slot came from
	// callTenants: WaitN, goroutine 0 for tenant "light" (a pause of
	// seamsJob.Think after each call), the others for "flood"; with
	// seamsJob.Fair the requests name their tenant, else they are plain
	// (first come, first served). Granted is when the call was made.
	callTenants = "tenants"
	callWindow  = "window" // Limiter.WaitN on one window band of WindowN per Window
)

// seamsJob is what a seams child is told.
type seamsJob struct {
	RedisURL   string // its address (and database, credentials) make the quick-start client
	KeyPrefix  string
	Key        string
	Call       string // callWait, callReserve or callWindow
	Rate       float64
	Burst      int
	WindowN    float64
	Window     time.Duration
	Goroutines int
	Fair       bool          // callTenants: name the tenant
	Think      time.Duration // callTenants: the light tenant's pause after each call
	// Tenants, with callTenants: goroutine g calls for tenant "t<g mod
	// Tenants>", none of them light (the faircost phase).
	Tenants int
	// Killed: the parent SIGKILLs the child at the run's end, so it calls
	// on past the end, never returns and never closes its Limiter.
	// Otherwise its calls stop at the end, it closes the Limiter and
	// prints "end".
	Killed bool
}

// windowPolicy is the window measurement's policy: n per w, one band.
func windowPolicy(n float64, w time.Duration) reserve.Policy {
	return reserve.Policy{{Name: "w", Window: reserve.Window{N: n, Length: w}}}
}

// seamsOut writes a seams child's lines, each in one write: a pipe takes
// a write of under 4 KB whole, so a child killed at any moment leaves
// only whole lines, and nothing waits in a buffer. The lines:
//
//	ready                         (readyToStart)
//	c <returned> <granted> <slot> <0|1> [tenant]
//	                              a call: when it returned; when Reserve returned
//	                              (callTenants: when the call was made) and the
//	                              slot it slept until (0 for the Waits); whether
//	                              the slot was granted locally; callTenants: the
//	                              tenant
//	m <ns> <why>                  Metrics.Moved
//	f <ns> <0|1>                  Metrics.Fallback: 1 to local pacing, 0 back on Redis
//	e <ns> <error>                a call failed
//	end                           the Limiter was closed
//
// Times are Unix ns.
type seamsOut struct{}

func (seamsOut) line(kind byte, at int64, rest ...string) {
	b := append(make([]byte, 0, 64), kind, ' ')
	b = strconv.AppendInt(b, at, 10)
	for _, s := range rest {
		b = append(b, ' ')
		b = append(b, s...)
	}
	b = append(b, '\n')
	_, _ = os.Stdout.Write(b)
}

// seamsEvents is the child's reserve.Metrics: moves and switches, each a
// line when it happens, from the run's start on (the warm-up's are not
// printed: "ready" must come first).
type seamsEvents struct {
	out     seamsOut
	started *atomic.Bool
}

func (seamsEvents) Reserved(string, []string, []float64, time.Duration, bool) {}
func (seamsEvents) RedisCall(string, time.Duration, error)                    {}
func (seamsEvents) Paused(string, time.Duration)                              {}
func (seamsEvents) Evictable(string)                                          {}
func (e seamsEvents) Moved(_ string, why string) {
	if e.started.Load() {
		e.out.line('m', time.Now().UnixNano(), why)
	}
}
func (e seamsEvents) Fallback(active bool) {
	if e.started.Load() {
		e.out.line('f', time.Now().UnixNano(), boolDigit(active))
	}
}

// unixNano is t in Unix ns, 0 for the zero time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func boolDigit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// quickStartClient is the README quick start's client for url:
// redis.NewClient with the address (and database and credentials) only,
// go-redis's defaults for the rest; reserve.New clones it as pacer needs.
func quickStartClient(url string) (*redis.Client, error) {
	u, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(&redis.Options{Addr: u.Addr, DB: u.DB, Username: u.Username, Password: u.Password, TLSConfig: u.TLSConfig}), nil
}

// runAsSeamsChild runs this process as one process of a seams fleet, if it
// is one, and returns its exit code and true.
func runAsSeamsChild() (code int, isChild bool) {
	return runChild(seamsChildEnv, "pacerbench seams child", seamsChild)
}

// seamsChild is one process of a seams fleet: a Limiter as the quick start
// makes it, a warm-up, "ready", the start and end times from stdin, then
// j.Goroutines goroutines calling the key, each call a line as it returns.
func seamsChild(j seamsJob) error {
	var out seamsOut
	rdb, err := quickStartClient(j.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var started atomic.Bool
	l, err := reserve.New(rdb, reserve.Options{KeyPrefix: j.KeyPrefix, Logger: log, Metrics: seamsEvents{out, &started}})
	if err != nil {
		return err
	}
	if !j.Killed {
		defer l.Close()
	}
	lim := reserve.Limit{Rate: j.Rate, Burst: j.Burst}
	pol := windowPolicy(j.WindowN, j.Window)
	cost := reserve.Cost{"w": 1}
	// call makes one call on key: for Reserve, when it returned, the slot
	// (after Sleep, which may move it) and whether it was granted locally.
	type grant struct {
		at, slot time.Time
		local    bool
		tenant   string
	}
	call := func(ctx context.Context, key string, lim reserve.Limit, pol reserve.Policy, g int) (grant, error) {
		switch j.Call {
		case callTenants:
			tenant := "flood"
			switch {
			case j.Tenants > 0:
				tenant = "t" + strconv.Itoa(g%j.Tenants)
			case g == 0:
				tenant = "light"
			}
			req := reserve.Single(key, lim, 1)
			if j.Fair {
				req.Tenant = tenant
			}
			at := time.Now()
			return grant{at: at, tenant: tenant}, l.WaitN(ctx, req)
		case callReserve:
			r, err := l.Reserve(ctx, key, lim)
			if err != nil {
				return grant{}, err
			}
			at := time.Now()
			err = r.Sleep(ctx)
			return grant{at: at, slot: r.Time(), local: r.Local()}, err
		case callWindow:
			return grant{}, l.WaitN(ctx, reserve.Request{Key: key, Policy: pol, Cost: cost})
		default:
			return grant{}, l.Wait(ctx, key, lim)
		}
	}

	// Warm up on a key of this process's own, at a limit nobody waits
	// for: every goroutine's connection dialed, the scripts loaded.
	warm := "warmup:" + strconv.Itoa(os.Getpid())
	errs := make([]error, j.Goroutines)
	var wg sync.WaitGroup
	for i := range j.Goroutines {
		wg.Go(func() {
			_, errs[i] = call(context.Background(), warm, reserve.Limit{Rate: 1e6, Burst: 1000}, windowPolicy(1e6, j.Window), i)
		})
	}
	wg.Wait()
	if err := firstErr(errs); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}

	end, err := readyToStart()
	if err != nil {
		return err
	}
	started.Store(true)
	ctx := context.Background()
	if !j.Killed {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, end)
		defer cancel()
	}
	for i := range j.Goroutines {
		wg.Go(func() {
			for {
				g, err := call(ctx, j.Key, lim, pol, i)
				t1 := time.Now()
				if err != nil {
					if !j.Killed && endOfRun(ctx, err) {
						return
					}
					out.line('e', t1.UnixNano(), strings.Join(strings.Fields(err.Error()), " "))
					time.Sleep(10 * time.Millisecond) // no spinning on a persistent error
					continue
				}
				if !j.Killed && !t1.Before(end) {
					return
				}
				fields := []string{strconv.FormatInt(unixNano(g.at), 10), strconv.FormatInt(unixNano(g.slot), 10), boolDigit(g.local)}
				if g.tenant != "" {
					fields = append(fields, g.tenant)
				}
				out.line('c', t1.UnixNano(), fields...)
				if g.tenant == "light" && j.Think > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(j.Think):
					}
				}
			}
		})
	}
	if j.Killed {
		// The parent kills this process at the end; should it not, the
		// process ends itself a minute later, as a failure.
		time.Sleep(time.Until(end) + time.Minute)
		return errors.New("not killed a minute after the run's end")
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		return err
	}
	fmt.Println("end")
	return nil
}

// seamsCall is one call a seams child made.
type seamsCall struct {
	At      int64 // when it returned, Unix ns
	Granted int64 // when Reserve returned (0 for the Waits)
	Slot    int64 // Reservation.Time after Sleep (0 for the Waits)
	Local   bool
	Tenant  string // callTenants
}

// seamsEvent is a move or a switch.
type seamsEvent struct {
	At   int64
	What string // a move's why; "1" or "0" for a switch to local or back to Redis
}

// seamsOutput is what a seams fleet's children printed, merged.
type seamsOutput struct {
	Calls     []seamsCall // in the order of At
	Moves     []seamsEvent
	Switches  []seamsEvent
	Errors    int      // failed calls
	ErrorText []string // the first few errors
}

// readSeamsChild adds a child's lines to out. A killed child has no "end"
// line, and may have a call line after its run's end: callers count calls
// by time.
func readSeamsChild(lines []string, killed bool, out *seamsOutput) error {
	if len(lines) == 0 || lines[0] != "ready" {
		return errors.New("no ready line")
	}
	ended := false
	for _, line := range lines[1:] {
		if line == "end" {
			ended = true
			continue
		}
		f := strings.SplitN(line, " ", 3)
		if len(f) < 2 || len(f[0]) != 1 {
			return fmt.Errorf("bad line %q", line)
		}
		at, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return fmt.Errorf("bad line %q", line)
		}
		rest := ""
		if len(f) == 3 {
			rest = f[2]
		}
		switch f[0] {
		case "c":
			g := strings.Fields(rest)
			if (len(g) != 3 && len(g) != 4) || (g[2] != "0" && g[2] != "1") {
				return fmt.Errorf("bad line %q", line)
			}
			granted, err1 := strconv.ParseInt(g[0], 10, 64)
			slot, err2 := strconv.ParseInt(g[1], 10, 64)
			if err1 != nil || err2 != nil {
				return fmt.Errorf("bad line %q", line)
			}
			c := seamsCall{At: at, Granted: granted, Slot: slot, Local: g[2] == "1"}
			if len(g) == 4 {
				c.Tenant = g[3]
			}
			out.Calls = append(out.Calls, c)
		case "m":
			out.Moves = append(out.Moves, seamsEvent{at, rest})
		case "f":
			out.Switches = append(out.Switches, seamsEvent{at, rest})
		case "e":
			out.Errors++
			if len(out.ErrorText) < 5 {
				out.ErrorText = append(out.ErrorText, rest)
			}
		default:
			return fmt.Errorf("bad line %q", line)
		}
	}
	if !killed && !ended {
		return errors.New("no end line")
	}
	return nil
}

// seamsFleet is one run's child processes.
type seamsFleet struct {
	job  seamsJob
	f    *fleetproc.Fleet
	kill context.CancelFunc // SIGKILLs every child (procgroup)
}

// startSeamsFleet starts procs children for j and waits until each is
// ready (its Limiter made, warmed up).
func startSeamsFleet(ctx context.Context, j seamsJob, procs int) (*seamsFleet, error) {
	ctx, kill := context.WithCancel(ctx)
	f, err := fleetproc.Start(ctx, fleetproc.Options{Env: seamsChildEnv, Procs: procs, Stdin: true, Spec: j})
	if err != nil {
		kill()
		return nil, err
	}
	s := &seamsFleet{job: j, f: f, kill: kill}
	if err := awaitReady(ctx, f); err != nil {
		kill()
		_ = f.Wait()
		return nil, fmt.Errorf("seams %w", err)
	}
	return s, nil
}

// begin tells every child the run's start and end.
func (s *seamsFleet) begin(start, end time.Time) {
	for _, ch := range s.f.Children() {
		fmt.Fprintf(ch.Stdin, "%d %d\n", start.UnixNano(), end.UnixNano())
		ch.Stdin.Close()
	}
}

// finish waits for the children (having killed them first if the job
// says so) and returns what they printed.
func (s *seamsFleet) finish() (seamsOutput, error) {
	if s.job.Killed {
		s.kill()
	}
	defer s.kill()
	var (
		out  seamsOutput
		errs []error
	)
	for _, ch := range s.f.Children() {
		err := ch.Wait()
		var exit *exec.ExitError
		if s.job.Killed && errors.As(err, &exit) && exit.ExitCode() == -1 {
			err = nil // killed by a signal, ours
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("seams process %d: %w\n%s", ch.Index, err, strings.TrimSpace(ch.Stderr())))
			continue
		}
		if err := readSeamsChild(ch.Lines(), s.job.Killed, &out); err != nil {
			errs = append(errs, fmt.Errorf("seams process %d: %w\n%s", ch.Index, err, strings.TrimSpace(ch.Stderr())))
		}
	}
	slices.SortFunc(out.Calls, func(a, b seamsCall) int { return cmp.Compare(a.At, b.At) })
	slices.SortFunc(out.Moves, func(a, b seamsEvent) int { return cmp.Compare(a.At, b.At) })
	slices.SortFunc(out.Switches, func(a, b seamsEvent) int { return cmp.Compare(a.At, b.At) })
	return out, errors.Join(errs...)
}
