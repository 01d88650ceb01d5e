// Command llm is pacer's LLM demo: a fleet of worker processes calls a fake
// LLM API that enforces requests and tokens per minute as OpenAI and
// Anthropic do (internal/provider.LLM), with one policy of two bands shared
// through Redis. A call's tokens are known only from its response: each
// worker estimates them (off by up to ±50%) and calls through a pacehttp
// Transport, which reserves the estimate, sends the request (a POST with an
// Idempotency-Key, so that it may be sent again after a 429), and settles
// the tokens the answer reports (Options.Settle). It prints progress and a
// summary measured on the provider's side: tokens per minute against the
// TPM quota, and the 429s.
//
//	go run ./examples/llm                          # embedded Redis (miniredis)
//	go run ./examples/llm -redis 127.0.0.1:6379    # or redis://host:port/db, rediss://...
//	go run -tags chart ./examples/llm -plot llm.svg  # and a chart of both bands
//	go run ./examples/llm -reserve estimate        # reserve the estimate itself
//	go run -tags chart ./examples/llm -tenants fair -plot t.svg  # one quota, many customers
//
// The provider's quotas are the flags (-rpm, -tpm); pacer's policy is
// derived from them (see policyFor).
//
// With -tenants, each process's workers call for customers of one SaaS on
// its one LLM quota: worker 0 for a live user (the Urgent lane; a call,
// then a pause of up to 2 s), workers 1 and 2 for two light customers (a
// pause of up to 6 s: with the defaults, each asks for about an eighth of
// the quota), and the others for a customer whose backfill floods the key
// (no pause: it takes whatever the others leave). -tenants
// fair names the tenant and lane on each call (reserve.Request.Tenant,
// Lane); -tenants fifo makes the same calls without, first come first
// served, as the reference. The summary gives each tenant's calls, share
// of the tokens and wait for its slot; -plot draws each tenant's requests.
package main

import (
	"bufio"
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer-go/pacer/examples/internal/chart"
	"github.com/pacer-go/pacer/examples/internal/demo"
	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// host is the API's host and pacer's key.
const host = "api.llm.example"

// config is what the flags set.
type config struct {
	RedisURL string // the -redis flag: "" for the embedded Redis
	RPM, TPM int    // the provider's quotas per minute
	Tokens   int    // mean tokens per call; actual costs are uniform in [Tokens/5, 9*Tokens/5]
	Error    float64
	Reserve  string // "low", "estimate" or "high"
	Procs    int
	Workers  int
	Duration time.Duration
	Latency  time.Duration
	Progress time.Duration
	Plot     string
	Seed     uint64
	Tenants  string // "", "fair" or "fifo"

	Profile    string // "", or a profile of package profile (profile.go)
	PerSecond  bool   // with Profile: the provider enforces the minute's quota per second
	ITPM, OTPM int    // with -profile anthropic
}

// childEnv carries a child process's job (see fleet).
const childEnv = "PACER_LLM_CHILD"

type child struct {
	Config      config
	ProviderURL string
	RedisURL    string
	Prefix      string
	Index       int
	End         time.Time // start no call after this
}

// tally is what a process's workers did.
type tally struct {
	Calls, Refused int     // 200s, and 429s left after the retries
	Settled        float64 // tokens settled: the usage Options.Settle read
	Unavailable    int     // reservations that failed with ErrUnavailable, tried again

	Tenants map[string]*tenantTally `json:",omitempty"` // with -tenants
}

// tenantTally is one tenant's calls (with -tenants).
type tenantTally struct {
	Calls  int
	Tokens float64
	Waits  []float64 // ms from asking for the slot to the call
	Times  []int64   // when each call was made, Unix ns
}

func (t *tally) add(o tally) {
	t.Calls += o.Calls
	t.Refused += o.Refused
	t.Settled += o.Settled
	t.Unavailable += o.Unavailable
	for name, o := range o.Tenants {
		t.tenant(name).add(o)
	}
}

func (t *tally) tenant(name string) *tenantTally {
	if t.Tenants == nil {
		t.Tenants = map[string]*tenantTally{}
	}
	if t.Tenants[name] == nil {
		t.Tenants[name] = &tenantTally{}
	}
	return t.Tenants[name]
}

func (t *tenantTally) add(o *tenantTally) {
	t.Calls += o.Calls
	t.Tokens += o.Tokens
	t.Waits = append(t.Waits, o.Waits...)
	t.Times = append(t.Times, o.Times...)
}

// A role is what a worker calls for, with -tenants (see roleOf).
type role struct {
	tenant string
	lane   reserve.Lane
	think  time.Duration // after each call, a pause of up to this long
}

// roles are the tenants, in the summary's order.
var roles = []role{{"live", reserve.Urgent, 2 * time.Second}, {"light-a", reserve.Normal, 6 * time.Second}, {"light-b", reserve.Normal, 6 * time.Second}, {"backfill", reserve.Normal, 0}}

// roleOf is worker w's role.
func roleOf(w int) role { return roles[min(w, len(roles)-1)] }

// summary is the run as the provider saw it.
type summary struct {
	Calls, Rejected int
	Tokens          int     // tokens the provider accepted
	TokensPerMin    float64 // held from the first third of the run to its end (steady)
	RequestsPerMin  float64 // likewise
	TPM, RPM        int
	Settled         float64 // tokens the workers settled
	Unavailable     int     // reservations tried again because Redis could not be reached
	Duration        time.Duration

	Tenants []tenantSummary // with -tenants
}

// tenantSummary is one tenant's part of the run.
type tenantSummary struct {
	Tenant       string
	Lane         reserve.Lane
	Calls        int
	TokenShare   float64 // of the tokens the provider accepted
	WaitP50, P99 time.Duration
	WaitMax      time.Duration
}

func (s summary) String() string {
	out := fmt.Sprintf("summary calls=%d rejected=%d tokens=%d tokens_per_min=%.0f tpm=%d of_tpm=%.1f%% requests_per_min=%.0f rpm=%d settled=%.0f duration=%.1f",
		s.Calls, s.Rejected, s.Tokens, s.TokensPerMin, s.TPM, 100*s.TokensPerMin/float64(s.TPM), s.RequestsPerMin, s.RPM, s.Settled, s.Duration.Seconds())
	if s.Unavailable > 0 {
		out += fmt.Sprintf(" unavailable=%d", s.Unavailable)
	}
	for _, t := range s.Tenants {
		out += fmt.Sprintf("\ntenant %-8s lane=%-6s calls=%d tokens=%.1f%% wait_p50=%v wait_p99=%v wait_max=%v",
			t.Tenant, t.Lane, t.Calls, 100*t.TokenShare, t.WaitP50.Round(time.Millisecond), t.P99.Round(time.Millisecond), t.WaitMax.Round(time.Millisecond))
	}
	return out
}

func main() {
	redis.SetLogger(reserve.RedisLogger(nil))
	var c config
	flag.StringVar(&c.RedisURL, "redis", "", demo.RedisFlagUsage)
	flag.IntVar(&c.RPM, "rpm", 1200, "the provider's requests per minute")
	flag.IntVar(&c.TPM, "tpm", 600_000, "the provider's tokens per minute")
	flag.IntVar(&c.Tokens, "tokens", 1000, "mean tokens per call (each uniform in [tokens/5, 9*tokens/5])")
	flag.Float64Var(&c.Error, "error", 0.5, "each estimate is the actual cost times 1+u, u uniform in [-error, +error]; below 1")
	flag.StringVar(&c.Reserve, "reserve", "low", "what a call reserves: low (the least the estimate allows, settle up), estimate, or high (the most, settle down)")
	flag.IntVar(&c.Procs, "procs", 4, "worker processes sharing the policy through Redis")
	flag.IntVar(&c.Workers, "workers", 8, "goroutines per process")
	flag.DurationVar(&c.Duration, "duration", 30*time.Second, "how long the fleet calls")
	flag.DurationVar(&c.Latency, "latency", 200*time.Millisecond, "the provider's time per call")
	flag.DurationVar(&c.Progress, "progress", time.Second, "how often to print progress (0: never)")
	flag.StringVar(&c.Plot, "plot", "", "write a chart of both bands (requests and tokens per 100 ms) to this SVG file (a build with -tags chart)")
	flag.Uint64Var(&c.Seed, "seed", 1, "seed of the simulated costs and estimates")
	flag.StringVar(&c.Tenants, "tenants", "", "fair or fifo: call for a live user, two light customers and a backfill (see the package doc)")
	flag.StringVar(&c.Profile, "profile", "", "pace with package profile's profile (openai, anthropic or azure) against a provider model of its rules (profile.go)")
	flag.BoolVar(&c.PerSecond, "per-second", false, "with -profile: the provider enforces its minute's quota per second")
	flag.IntVar(&c.ITPM, "itpm", 720_000, "with -profile anthropic: the provider's input tokens per minute")
	flag.IntVar(&c.OTPM, "otpm", 120_000, "with -profile anthropic: the provider's output tokens per minute")
	if os.Getenv(childEnv) != "" {
		if err := childMain(os.Stdout); err != nil {
			log.Fatal(err)
		}
		return
	}
	flag.Parse()
	if flag.NArg() > 0 {
		log.Fatalf("llm: unexpected arguments %q", flag.Args())
	}
	if c.Profile != "" {
		if err := c.validate(); err != nil {
			log.Fatal(err)
		}
		s, err := runProfile(context.Background(), c, os.Stderr)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(s)
		return
	}
	s, err := run(context.Background(), c, os.Stderr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s)
}

// validate checks the flags.
func (c config) validate() error {
	switch {
	case c.RPM < 60 || c.TPM < 60:
		return errors.New("llm: -rpm and -tpm must be at least 60 (one a second)")
	case c.Tokens < 5:
		return errors.New("llm: -tokens must be at least 5")
	case !(c.Error >= 0 && c.Error < 1):
		return fmt.Errorf("llm: -error %v: want 0 <= error < 1", c.Error)
	case c.Reserve != "low" && c.Reserve != "estimate" && c.Reserve != "high":
		return fmt.Errorf("llm: -reserve %q: want low, estimate or high", c.Reserve)
	case c.Procs < 1 || c.Workers < 1:
		return errors.New("llm: -procs and -workers must be at least 1")
	case c.Duration <= 0 || c.Latency < 0 || c.Progress < 0:
		return errors.New("llm: -duration must be positive, -latency and -progress not negative")
	case c.Tenants != "" && c.Tenants != "fair" && c.Tenants != "fifo":
		return fmt.Errorf("llm: -tenants %q: want fair or fifo", c.Tenants)
	case c.Tenants != "" && c.Workers < len(roles):
		return fmt.Errorf("llm: -tenants needs at least %d -workers per process", len(roles))
	case c.PerSecond && c.Profile == "":
		return errors.New("llm: -per-second needs -profile")
	case c.Profile != "" && (c.Tenants != "" || c.Plot != "" || c.Reserve != "low"):
		return errors.New("llm: -profile reserves as its profile does: no -tenants, -plot or -reserve with it")
	}
	if c.Profile != "" {
		return largestFits(c)
	}
	pol := policyFor(c.RPM, c.TPM)
	if most := c.reserved(float64(9*c.Tokens/5) * (1 + c.Error)); most > float64(pol[1].Limit.Burst) {
		return fmt.Errorf("llm: a call may reserve %.0f tokens, more than pacer's burst of %d (a second of -tpm): lower -tokens or raise -tpm", most, pol[1].Limit.Burst)
	}
	return nil
}

// policyFor derives pacer's policy from the provider's quotas. The provider
// keeps each quota in a bucket that holds a minute's worth and refills at
// quota/60 per second, so any schedule within Rate quota/60 and a Burst up
// to the quota is accepted. pacer paces at that rate with a burst of one
// second's worth: the other 59 s of the provider's capacity are the margin
// that absorbs what the calls in flight have used beyond what they
// reserved, until they settle (at most workers x (largest cost - smallest
// reservation) tokens).
func policyFor(rpm, tpm int) reserve.Policy {
	return reserve.Policy{
		{Name: "requests", Limit: reserve.Limit{Rate: float64(rpm) / 60, Burst: max(1, rpm/60)}},
		{Name: "tokens", Limit: reserve.Limit{Rate: float64(tpm) / 60, Burst: max(1, tpm/60)}},
	}
}

// reserved is what a call with the estimate est reserves, by c.Reserve:
// with an estimate off by a factor 1+u, |u| <= c.Error, the actual cost is
// between est/(1+Error) and est/(1-Error).
func (c config) reserved(est float64) float64 {
	switch c.Reserve {
	case "low":
		return math.Floor(est / (1 + c.Error))
	case "high":
		return math.Ceil(est / (1 - c.Error))
	}
	return math.Round(est)
}

// run runs the fleet and returns the provider's summary; progress goes to
// out.
func run(ctx context.Context, c config, out io.Writer) (summary, error) {
	if c.Plot != "" {
		if err := chart.Check("./examples/llm"); err != nil {
			return summary{}, err
		}
	}
	if err := c.validate(); err != nil {
		return summary{}, err
	}
	p, err := provider.StartLLM(provider.LLMOptions{RPM: c.RPM, TPM: c.TPM, Latency: c.Latency})
	if err != nil {
		return summary{}, err
	}
	defer p.Close()
	r, err := demo.Connect(c.RedisURL, out, "")
	if err != nil {
		return summary{}, fmt.Errorf("llm: %w", err)
	}
	defer r.Close()
	pol := policyFor(c.RPM, c.TPM)
	fmt.Fprintf(out, "provider: %d requests and %d tokens per minute; pacer: requests %g/s burst %d, tokens %g/s burst %d; reserving %s\n",
		c.RPM, c.TPM, pol[0].Limit.Rate, pol[0].Limit.Burst, pol[1].Limit.Rate, pol[1].Limit.Burst, c.Reserve)

	prefix := fmt.Sprintf("pacer:llm:%d:", time.Now().UnixNano())
	demo.PrintWatch(out, r, prefix)
	start := time.Now()
	end := start.Add(c.Duration)
	stop := progress(out, p, c, start)
	var t tally
	if c.Procs == 1 {
		t, err = work(ctx, c, p.URL(), r.Client, prefix, 0, end, out)
	} else {
		fmt.Fprintf(out, "starting %d worker processes of %d goroutines each\n", c.Procs, c.Workers)
		t, err = fleet(ctx, c, p.URL(), r.URL, prefix, end)
	}
	stop()
	if err != nil {
		return summary{}, err
	}
	st := p.Stats(host)
	s := summary{Calls: st.Calls + st.Rejected, Rejected: st.Rejected, Tokens: st.Tokens, TPM: c.TPM, RPM: c.RPM,
		Settled: t.Settled, Unavailable: t.Unavailable, Duration: time.Since(start)}
	uses, rejected := p.Uses(host)
	s.RequestsPerMin, s.TokensPerMin = steady(uses, c.Duration/3, end)
	if c.Tenants != "" {
		return s, tenantsReport(c, &s, t, start, out)
	}
	if c.Plot != "" {
		calls, tokens := make([]time.Time, len(uses)), make([]float64, len(uses))
		for i, u := range uses {
			calls[i], tokens[i] = u.At, float64(u.Tokens)
		}
		title := fmt.Sprintf("llm: %d processes x %d workers, reserving %s, estimates off by up to ±%g%%", c.Procs, c.Workers, c.Reserve, 100*c.Error)
		err := chart.WriteFile(c.Plot, chart.Chart{Title: title, Start: start, Series: []chart.Series{
			{Name: "requests", Calls: calls, Rejected: rejected, Unit: "requests", Rate: pol[0].Limit.Rate, Quota: float64(c.RPM) / 60},
			{Name: "tokens", Calls: calls, Amounts: tokens, Unit: "tokens", Rate: pol[1].Limit.Rate, Quota: float64(c.TPM) / 60},
		}})
		if err != nil {
			return s, err
		}
		fmt.Fprintf(out, "wrote the chart of both bands to %s\n", c.Plot)
	}
	return s, nil
}

// tenantsReport fills s.Tenants from t and writes c.Plot: each tenant's
// requests per 100 ms.
func tenantsReport(c config, s *summary, t tally, start time.Time, out io.Writer) error {
	var series []chart.Series
	for _, r := range roles {
		tt := t.Tenants[r.tenant]
		if tt == nil {
			tt = &tenantTally{}
		}
		ts := tenantSummary{Tenant: r.tenant, Lane: r.lane, Calls: tt.Calls}
		if s.Tokens > 0 {
			ts.TokenShare = tt.Tokens / float64(s.Tokens)
		}
		slices.Sort(tt.Waits)
		if n := len(tt.Waits); n > 0 {
			at := func(q float64) time.Duration {
				return time.Duration(tt.Waits[min(max(int(q*float64(n)+0.5)-1, 0), n-1)] * float64(time.Millisecond))
			}
			ts.WaitP50, ts.P99, ts.WaitMax = at(0.5), at(0.99), at(1)
		}
		s.Tenants = append(s.Tenants, ts)
		calls := make([]time.Time, len(tt.Times))
		for i, ns := range tt.Times {
			calls[i] = time.Unix(0, ns)
		}
		slices.SortFunc(calls, func(a, b time.Time) int { return a.Compare(b) })
		series = append(series, chart.Series{Name: r.tenant + " (" + r.lane.String() + ")", Calls: calls, Unit: "requests"})
	}
	if c.Plot == "" {
		return nil
	}
	pol := policyFor(c.RPM, c.TPM)
	title := fmt.Sprintf("llm -tenants %s: %d processes x %d workers, one quota; each tenant's requests", c.Tenants, c.Procs, c.Workers)
	if err := chart.WriteFile(c.Plot, chart.Chart{Title: title, Start: start, Rate: pol[0].Limit.Rate, Series: series}); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote the chart of each tenant's requests to %s\n", c.Plot)
	return nil
}

// steady returns the requests and tokens per minute of the calls accepted
// from skip after the first one to the last one by end: the rate the fleet
// holds once the first burst, and what the first calls used beyond their
// reservations, are behind it, and while the workers still ask (after end
// no call starts, and the calls queued before it drain).
func steady(uses []provider.Use, skip time.Duration, end time.Time) (requests, tokens float64) {
	if len(uses) == 0 {
		return 0, 0
	}
	from, last := uses[0].At.Add(skip), uses[0].At
	n, sum := 0, 0
	for _, u := range uses {
		if u.At.After(from) && !u.At.After(end) {
			n++
			sum += u.Tokens
			last = u.At
		}
	}
	if span := last.Sub(from).Minutes(); span > 0 {
		return float64(n) / span, float64(sum) / span
	}
	return 0, 0
}

// fleet runs c.Procs child processes and sums what they report.
func fleet(ctx context.Context, c config, providerURL, redisURL, prefix string, end time.Time) (tally, error) {
	exe, err := os.Executable()
	if err != nil {
		return tally{}, err
	}
	type result struct {
		t   tally
		err error
	}
	results := make(chan result, c.Procs)
	for i := range c.Procs {
		job, _ := json.Marshal(child{Config: c, ProviderURL: providerURL, RedisURL: redisURL, Prefix: prefix, Index: i, End: end})
		cmd := exec.CommandContext(ctx, exe)
		cmd.Env = append(os.Environ(), childEnv+"="+string(job))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return tally{}, err
		}
		if err := cmd.Start(); err != nil {
			return tally{}, err
		}
		go func() {
			var t tally
			var last string
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				last = sc.Text()
			}
			if err := cmd.Wait(); err != nil {
				results <- result{err: fmt.Errorf("llm: worker process %d: %w", i, err)}
				return
			}
			if err := json.Unmarshal([]byte(last), &t); err != nil {
				results <- result{err: fmt.Errorf("llm: worker process %d reported %q: %w", i, last, err)}
				return
			}
			results <- result{t: t}
		}()
	}
	var sum tally
	var first error
	for range c.Procs {
		r := <-results
		if r.err != nil && first == nil {
			first = r.err
		}
		sum.add(r.t)
	}
	return sum, first
}

// childMain is a worker process: it works until the end and prints its
// tally as JSON on the last line of out.
func childMain(out io.Writer) error {
	var j child
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &j); err != nil {
		return fmt.Errorf("llm: %s: %w", childEnv, err)
	}
	_, opts, err := demo.ParseRedis(j.RedisURL)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	work := work
	if j.Config.Profile != "" {
		work = workProfile
	}
	t, err := work(context.Background(), j.Config, j.ProviderURL, rdb, j.Prefix, j.Index, j.End, os.Stderr)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(t)
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}

// work runs c.Workers goroutines that call the API until end: estimate,
// reserve, sleep to the slot, call, settle the tokens the response reports.
func work(ctx context.Context, c config, providerURL string, rdb redis.UniversalClient, prefix string, index int, end time.Time, logOut io.Writer) (tally, error) {
	logger := slog.New(slog.NewTextHandler(logOut, nil))
	limiter, err := reserve.New(rdb, reserve.Options{KeyPrefix: prefix, Logger: logger, RequireRedis: true})
	if err != nil {
		return tally{}, err
	}
	defer limiter.Close()
	var (
		mu    sync.Mutex
		total tally
		fail  atomic.Pointer[error]
		wg    sync.WaitGroup
	)
	// The workers call through pacehttp: each request reserves the route
	// its call put in its context, a 429 pauses the fleet for as long as
	// the provider said and the request is sent again (it carries an
	// Idempotency-Key), and the tokens the answer reports settle it.
	transport, err := pacehttp.New(limiter, pacehttp.Options{
		Route: func(req *http.Request) (pacehttp.Route, error) {
			rt, ok := req.Context().Value(routeKey{}).(pacehttp.Route)
			if !ok {
				return pacehttp.Route{}, errors.New("llm: a request without its route")
			}
			return rt, nil
		},
		Settle: func(resp *http.Response) (reserve.Cost, error) {
			tokens, err := usage(resp)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			total.Settled += tokens
			mu.Unlock()
			return reserve.Cost{"tokens": tokens}, nil
		},
		Logger: logger,
	})
	if err != nil {
		return tally{}, err
	}
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	pol := policyFor(c.RPM, c.TPM)
	for w := range c.Workers {
		rng := rand.New(rand.NewPCG(c.Seed, uint64(index*c.Workers+w)))
		wg.Go(func() {
			var t tally
			defer func() {
				mu.Lock()
				total.add(t)
				mu.Unlock()
			}()
			var rl *role
			if c.Tenants != "" {
				r := roleOf(w)
				rl = &r
			}
			for fail.Load() == nil {
				if err := call(ctx, c, pol, client, providerURL, rng, end, rl, &t); err != nil {
					if !errors.Is(err, errEnd) {
						fail.CompareAndSwap(nil, &err)
					}
					return
				}
			}
		})
	}
	wg.Wait()
	if e := fail.Load(); e != nil {
		return total, *e
	}
	return total, nil
}

// routeKey is the context key of a request's pacehttp.Route.
type routeKey struct{}

// usage reads the tokens a successful answer reports, and leaves its body
// readable.
func usage(resp *http.Response) (float64, error) {
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	var u struct {
		Usage struct {
			TotalTokens *float64 `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &u); err != nil || u.Usage.TotalTokens == nil {
		return 0, fmt.Errorf("llm: no usage in the provider's body %q (%v)", body, err)
	}
	return *u.Usage.TotalTokens, nil
}

// errEnd: the run is over.
var errEnd = errors.New("the run is over")

// call makes one call through client, paced on pol: it returns errEnd once
// the run is over. With a role (-tenants), the call is for its tenant:
// fair (with -tenants fair) and counted apart.
func call(ctx context.Context, c config, pol reserve.Policy, client *http.Client, providerURL string, rng *rand.Rand, end time.Time, rl *role, t *tally) error {
	if !time.Now().Before(end) {
		return errEnd
	}
	lo, hi := float64(c.Tokens)/5, float64(9*c.Tokens)/5
	actual := math.Round(lo + rng.Float64()*(hi-lo))
	est := actual * (1 + c.Error*(2*rng.Float64()-1))
	rt := pacehttp.Route{Key: host, Policy: pol, Cost: reserve.Cost{"requests": 1, "tokens": c.reserved(est)}}
	if rl != nil && c.Tenants == "fair" {
		rt.Tenant, rt.Lane = rl.tenant, rl.lane
	}
	var sent atomic.Int64 // when the request was written, Unix ns (the last try's)
	trace := &httptrace.ClientTrace{WroteHeaders: func() { sent.Store(time.Now().UnixNano()) }}
	rctx := httptrace.WithClientTrace(context.WithValue(ctx, routeKey{}, rt), trace)
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, providerURL+"/v1/chat/completions", strings.NewReader(fmt.Sprintf(`{"tokens": %.0f}`, actual)))
	if err != nil {
		return err
	}
	req.Host = host
	// A POST is sent again after a 429 only when it says it may be.
	req.Header.Set("Idempotency-Key", crand.Text())
	asked := time.Now()
	resp, err := client.Do(req)
	if errors.Is(err, reserve.ErrUnavailable) {
		// Redis could not be reached and this process has no share to
		// pace on alone (it joined after others fell back): nothing was
		// reserved, so try again shortly.
		t.Unavailable++
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
			return nil
		}
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		// Refused after every retry: the fleet is paused as the provider
		// asked; the next call waits for it.
		t.Refused++
		return nil
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return fmt.Errorf("llm: provider answered %s: %s", resp.Status, body)
	}
	tokens, err := usage(resp)
	if err != nil {
		return err
	}
	t.Calls++
	if rl != nil {
		tt := t.tenant(rl.tenant)
		tt.Calls++
		tt.Tokens += tokens
		tt.Waits = append(tt.Waits, float64(sent.Load()-asked.UnixNano())/float64(time.Millisecond))
		tt.Times = append(tt.Times, sent.Load())
		if rl.think > 0 {
			select {
			case <-time.After(time.Duration(rng.Int64N(int64(rl.think)))):
			case <-ctx.Done():
			}
		}
	}
	return nil
}

// progress prints, every c.Progress, the calls, 429s and both bands' use
// per minute over the last interval.
func progress(out io.Writer, p *provider.LLM, c config, start time.Time) (stop func()) {
	if c.Progress <= 0 {
		return func() {}
	}
	var prev provider.LLMStats
	return demo.Every(c.Progress, func() {
		st := p.Stats(host)
		per := time.Minute.Seconds() / c.Progress.Seconds()
		fmt.Fprintf(out, "t=%4.1fs calls=%d 429s=%d  tokens/min %.0f (tpm %d)  requests/min %.0f (rpm %d)\n",
			time.Since(start).Seconds(), st.Calls+st.Rejected, st.Rejected,
			float64(st.Tokens-prev.Tokens)*per, c.TPM, float64(st.Calls-prev.Calls)*per, c.RPM)
		prev = st
	})
}
