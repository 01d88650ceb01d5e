// Command pacermixed runs a mixed fleet (package integration/mixed): Go
// and Python processes pacing one key at 500/s on one redis-server, through
// Redis stopped and restarted empty and a pause of the key, each call made
// to one fake provider. It prints what the provider saw (the busiest 100 ms
// and 1 s, calls per second), each process's calls, and the run's verdict
// on the slots (no interval over a band's bound, no slot in the pause);
// then the floor, in the same run: as many callers in this one process on
// one x/time/rate Limiter at the same rate, and the busiest 100 ms the
// provider saw of them (mixed.Floor).
//
//	go run ./integration/cmd/pacermixed            # a Limit of 500/s, burst 1
//	go run ./integration/cmd/pacermixed -bands     # and 20,000 tokens/s, settled
//
// It needs redis-server on PATH and /usr/bin/python3 with redis-py and
// lupa. The exit status is 1 when the verdict finds a breach.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/pacer-go/pacer/integration/mixed"
)

func main() {
	mixed.Main() // the Go processes of the fleet are this binary
	goProcs := flag.Int("go", 2, "Go processes")
	pyProcs := flag.Int("py", 2, "Python processes")
	threads := flag.Int("threads", 4, "callers per process")
	rate := flag.Float64("rate", 500, "requests per second (burst 1)")
	bands := flag.Bool("bands", false, "two bands: also 20000 tokens/s (burst 2000), each call reserving 80 and settling its usage")
	length := flag.Duration("length", 14*time.Second, "the run")
	py := flag.String("python", "/usr/bin/python3", "the Python interpreter")
	faults := flag.Bool("faults", true, "stop Redis at 4 s, restart it empty at 6 s, pause the key at 10 s for 1 s")
	floor := flag.Duration("floor", 4*time.Second, "then run the floor for this long: the same callers in one process on one x/time/rate Limiter (0: none)")
	flag.Parse()
	repo, err := mixed.Repo()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pacermixed:", err)
		os.Exit(2)
	}
	c := mixed.Config{Go: *goProcs, Python: *pyProcs, Threads: *threads, Rate: *rate, Bands: *bands, Length: *length,
		StopAt: 4 * time.Second, RestartAt: 6 * time.Second, PauseAt: 10 * time.Second, PauseFor: time.Second,
		Python3: *py, Repo: repo}
	if !*faults {
		c.StopAt, c.RestartAt, c.PauseAt = 0, 0, 0
	}
	res, err := mixed.Run(context.Background(), c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pacermixed:", err)
		os.Exit(1)
	}
	code := report(res)
	if *floor > 0 {
		callers := (*goProcs + *pyProcs) * *threads
		b, n, err := mixed.Floor(context.Background(), callers, *rate, *floor)
		if err != nil {
			fmt.Fprintln(os.Stderr, "pacermixed: the floor:", err)
			os.Exit(1)
		}
		fmt.Printf("floor: %d callers in one process on one x/time/rate Limiter at %g/s, burst 1, %v: %d calls; busiest 100 ms: %d calls\n",
			callers, *rate, *floor, n, b)
	}
	os.Exit(code)
}

func report(r *mixed.Result) int {
	c := r.Config
	what := fmt.Sprintf("%g requests/s, burst 1", c.Rate)
	if c.Bands {
		what += fmt.Sprintf("; %d tokens/s, burst %d, 80 reserved and the usage settled", mixed.TokenRate, mixed.TokenBurst)
	}
	fmt.Printf("mixed fleet: %d Go + %d Python processes x %d callers, one key, %s, %v\n", c.Go, c.Python, c.Threads, what, c.Length)
	fmt.Printf("Redis stopped at %v, restarted empty at %v; the key paused at %v for %v\n", c.StopAt, c.RestartAt, c.PauseAt, c.PauseFor)
	b100, t100 := r.Busiest(100 * time.Millisecond)
	b1s, t1s := r.Busiest(time.Second)
	fmt.Printf("provider: %d calls; busiest 100 ms: %d calls", len(r.Arrivals), b100)
	if c.Bands {
		fmt.Printf(" (%d tokens)", t100)
	}
	fmt.Printf("; busiest 1 s: %d calls", b1s)
	if c.Bands {
		fmt.Printf(" (%d tokens)", t1s)
	}
	fmt.Println()
	if c.StopAt > 0 {
		for _, ph := range []struct {
			name     string
			from, to time.Duration
		}{
			{"on Redis", 0, c.StopAt}, {"Redis down", c.StopAt, c.RestartAt}, {"back on Redis", c.RestartAt, c.PauseAt},
			{"after the pause", c.PauseAt + c.PauseFor, c.Length},
		} {
			n, _ := r.BusiestIn(100*time.Millisecond, ph.from, ph.to)
			fmt.Printf("  busiest 100 ms %s [%v, %v): %d calls\n", ph.name, ph.from, ph.to, n)
		}
	}
	fmt.Printf("the busiest 100 ms of fire times, by process: %v\n", r.BusiestFires(100*time.Millisecond))
	per := r.PerSecond()
	cells := make([]string, len(per))
	for i, n := range per {
		cells[i] = fmt.Sprint(n)
	}
	fmt.Printf("per second: %s\n", strings.Join(cells, " "))
	by := r.ByProc()
	names := make([]string, 0, len(by))
	for n := range by {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Printf("  %s: %d calls, %d granted locally\n", n, by[n][0], by[n][1])
	}
	fmt.Printf("calls the provider saw inside the pause (after its first %v): %d; slots inside it: %d\n",
		mixed.PauseLead, r.ArrivalsInPause(mixed.PauseLead), len(r.InPause()))
	bad := 0
	for _, e := range r.Excesses() {
		bad++
		fmt.Printf("BREACH: band %s: %.1f units in [%v, %v] after the start, bound %.2f\n", e.Band, e.Units,
			time.Unix(0, e.From).Sub(r.Start), time.Unix(0, e.To).Sub(r.Start), e.Bound)
		for _, c := range r.Calls {
			if c.Slot >= e.From && c.Slot <= e.To {
				fmt.Printf("    %s %v local=%v\n", c.Proc, time.Unix(0, c.Slot).Sub(r.Start), c.Local)
			}
		}
	}
	if len(r.InPause()) > 0 {
		bad++
	}
	for _, e := range r.Errors {
		bad++
		fmt.Println("error:", e)
	}
	if bad > 0 {
		fmt.Println("verdict: FAIL")
		return 1
	}
	fmt.Printf("verdict: every interval of the slots within burst + rate x (T + %v); no slot in the pause\n", mixed.SlotEps)
	return 0
}
