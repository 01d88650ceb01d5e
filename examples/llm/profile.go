package main

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer-go/pacer/examples/internal/demo"
	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/profile"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// With -profile, the fleet paces with a profile of package profile against
// a provider model that follows the same published rules: openai against
// provider.LLM, anthropic against provider.Anthropic, azure against
// provider.Azure. -per-second makes the provider enforce the minute's
// quota per second (LLM and Anthropic: buckets holding one second; Azure:
// requests evaluated each second instead of each 10 s). The costs and the
// estimates are the demo's (-tokens, -error); the profile is built as a
// newcomer would, from the provider's quotas and Settings{Error: -error}.

// profileNames are the -profile values.
var profileNames = []string{"openai", "anthropic", "azure"}

// inputShare is the part of a call's tokens that is its prompt, with the
// anthropic and azure profiles (the rest is its output, or max_tokens).
const inputShare = 0.8

// profileFor builds c.Profile's profile as a user would from the
// provider's quotas.
func profileFor(c config) (*profile.Profile, error) {
	s := profile.Settings{}
	switch c.Profile {
	case "openai":
		return profile.OpenAI(profile.OpenAILimits{Model: "demo", RPM: c.RPM, TPM: c.TPM}, s)
	case "anthropic":
		return profile.Anthropic(profile.AnthropicLimits{Model: "demo", RPM: c.RPM, ITPM: c.ITPM, OTPM: c.OTPM}, s)
	case "azure":
		return profile.AzureOpenAI(profile.AzureLimits{Deployment: "demo", TPM: c.TPM, Period: c.azurePeriod()}, s)
	}
	return nil, fmt.Errorf("llm: -profile %q: want one of %s", c.Profile, strings.Join(profileNames, ", "))
}

// largestFits checks that the profile's bands hold the largest call the
// run may make (its tokens at their largest, estimated at +Error).
func largestFits(c config) error {
	p, err := profileFor(c)
	if err != nil {
		return err
	}
	if _, err := p.Request(estimate(c, float64(9*c.Tokens/5), func(v float64) float64 { return v * (1 + c.Error) })); err != nil {
		return fmt.Errorf("llm: the largest call does not fit: %w; lower -tokens or raise the quotas", err)
	}
	return nil
}

// estimate is the Call of a call of actual tokens, each part estimated
// by off (Azure's max_tokens is known exactly), and the body it sends.
func estimate(c config, actual float64, off func(float64) float64) profile.Call {
	call, _ := callOf(c, actual, off)
	return call
}

// callOf returns the Call of a call of actual tokens, its parts estimated
// by off, and the body the provider model reads.
func callOf(c config, actual float64, off func(float64) float64) (profile.Call, string) {
	in := math.Max(1, math.Round(actual*inputShare))
	out := actual - in
	switch c.Profile {
	case "anthropic":
		return profile.Call{Input: off(in), Output: off(out)}, fmt.Sprintf(`{"input_tokens": %.0f, "output_tokens": %.0f}`, in, out)
	case "azure":
		return profile.Call{Input: off(in), Output: out}, fmt.Sprintf(`{"prompt_tokens": %.0f, "max_tokens": %.0f}`, in, out)
	}
	return profile.Call{Input: off(actual)}, fmt.Sprintf(`{"tokens": %.0f}`, actual)
}

// azurePeriod is the Azure model's (and profile's) request period.
func (c config) azurePeriod() time.Duration {
	if c.PerSecond {
		return time.Second
	}
	return 10 * time.Second
}

// fakeAPI is a provider model, as the profile run needs it.
type fakeAPI interface {
	URL() string
	Close() error
}

// quota is one of the provider's quotas per minute and the units a call
// charged on it.
type quota struct {
	name string
	per  float64 // per minute
}

// startFake starts c.Profile's provider model and returns it with its
// quotas and a function returning each accepted call's time and units (in
// the quotas' order) and the 429s.
func startFake(c config) (fakeAPI, []quota, func() ([]time.Time, [][]float64, []time.Time), error) {
	hold := time.Duration(0)
	if c.PerSecond {
		hold = time.Second
	}
	switch c.Profile {
	case "openai":
		p, err := provider.StartLLM(provider.LLMOptions{RPM: c.RPM, TPM: c.TPM, Latency: c.Latency, Hold: hold})
		if err != nil {
			return nil, nil, nil, err
		}
		return p, []quota{{"requests", float64(c.RPM)}, {"tokens", float64(c.TPM)}}, func() ([]time.Time, [][]float64, []time.Time) {
			uses, rej := p.Uses(host)
			at, units := make([]time.Time, len(uses)), make([][]float64, len(uses))
			for i, u := range uses {
				at[i], units[i] = u.At, []float64{1, float64(u.Tokens)}
			}
			return at, units, rej
		}, nil
	case "anthropic":
		p, err := provider.StartAnthropic(provider.AnthropicOptions{RPM: c.RPM, ITPM: c.ITPM, OTPM: c.OTPM, Latency: c.Latency, Hold: hold})
		if err != nil {
			return nil, nil, nil, err
		}
		return p, []quota{{"requests", float64(c.RPM)}, {"input-tokens", float64(c.ITPM)}, {"output-tokens", float64(c.OTPM)}}, func() ([]time.Time, [][]float64, []time.Time) {
			uses, rej := p.Uses(host)
			at, units := make([]time.Time, len(uses)), make([][]float64, len(uses))
			for i, u := range uses {
				at[i], units[i] = u.At, []float64{1, float64(u.Input), float64(u.Output)}
			}
			return at, units, rej
		}, nil
	case "azure":
		p, err := provider.StartAzure(provider.AzureOptions{TPM: c.TPM, Period: c.azurePeriod(), Latency: c.Latency})
		if err != nil {
			return nil, nil, nil, err
		}
		return p, []quota{{"requests", float64(provider.AzureRPM(c.TPM))}, {"tokens", float64(c.TPM)}}, func() ([]time.Time, [][]float64, []time.Time) {
			uses, rej := p.Uses(host)
			at, units := make([]time.Time, len(uses)), make([][]float64, len(uses))
			for i, u := range uses {
				at[i], units[i] = u.At, []float64{1, float64(u.Tokens)}
			}
			return at, units, rej
		}, nil
	}
	return nil, nil, nil, fmt.Errorf("llm: -profile %q: want one of %s", c.Profile, strings.Join(profileNames, ", "))
}

// profileSummary is a -profile run as the provider saw it.
type profileSummary struct {
	Profile   string
	PerSecond bool
	Calls     int             // accepted
	Rejected  int             // 429s the provider answered
	Refusals  []time.Duration // when the first of them came, from the start
	Quotas    []quota
	Steady    []float64 // per quota: units per minute from a third of the run to its end
	Whole     []float64 // per quota: units accepted by the end / (quota × duration)
	Binding   int       // the quota with the highest steady share
	Charged   float64   // token units the provider charged
	Settled   float64   // token units the workers settled
	Steal     time.Duration
	Load      [2]string // the load average over a minute, at the start and at the end
	Duration  time.Duration
}

func (s profileSummary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "profile=%s per_second=%t calls=%d rejected=%d", s.Profile, s.PerSecond, s.Calls, s.Rejected)
	for i, q := range s.Quotas {
		fmt.Fprintf(&b, " %s_per_min=%.0f of_%s=%.1f%%", q.name, s.Steady[i], q.name, 100*s.Steady[i]/q.per)
	}
	if len(s.Refusals) > 0 {
		fmt.Fprintf(&b, " first_429s_at=%v", s.Refusals)
	}
	q := s.Quotas[s.Binding]
	fmt.Fprintf(&b, " binding=%s of_binding=%.1f%% whole_run_of_binding=%.1f%% charged=%.0f settled=%.0f steal=%s load=%s-%s duration=%.1f",
		q.name, 100*s.Steady[s.Binding]/q.per, 100*s.Whole[s.Binding], s.Charged, s.Settled, stealString(s.Steal), s.Load[0], s.Load[1], s.Duration.Seconds())
	return b.String()
}

func stealString(d time.Duration) string {
	if d < 0 {
		return "unknown"
	}
	return d.Round(10 * time.Millisecond).String()
}

// steal reads the machine's steal time so far from /proc/stat (all CPUs,
// at 100 ticks a second); -1 where it cannot.
func steal() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return -1
	}
	v, err := strconv.ParseFloat(f[8], 64)
	if err != nil {
		return -1
	}
	return time.Duration(v / 100 * float64(time.Second))
}

// loadAverage is the machine's load average over the last minute, "?"
// where it cannot be read.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// runProfile runs the fleet with -profile and returns the provider's
// summary; progress goes to out.
func runProfile(ctx context.Context, c config, out io.Writer) (profileSummary, error) {
	prof, err := profileFor(c)
	if err != nil {
		return profileSummary{}, err
	}
	p, quotas, log, err := startFake(c)
	if err != nil {
		return profileSummary{}, err
	}
	defer p.Close()
	r, err := demo.Connect(c.RedisURL, out, "")
	if err != nil {
		return profileSummary{}, fmt.Errorf("llm: %w", err)
	}
	defer r.Close()
	fmt.Fprintf(out, "provider %s (per second: %t); profile %s, key %q, policy %+v\n", c.Profile, c.PerSecond, prof.Name, prof.Key, prof.Policy)
	prefix := fmt.Sprintf("pacer:llm:%d:", time.Now().UnixNano())
	demo.PrintWatch(out, r, prefix)
	steal0, load0 := steal(), loadAverage()
	start := time.Now()
	end := start.Add(c.Duration)
	var t tally
	if c.Procs == 1 {
		t, err = workProfile(ctx, c, p.URL(), r.Client, prefix, 0, end, out)
	} else {
		fmt.Fprintf(out, "starting %d worker processes of %d goroutines each\n", c.Procs, c.Workers)
		t, err = fleet(ctx, c, p.URL(), r.URL, prefix, end)
	}
	if err != nil {
		return profileSummary{}, err
	}
	s := profileSummary{Profile: c.Profile, PerSecond: c.PerSecond, Quotas: quotas, Settled: t.Settled, Duration: time.Since(start), Steal: -1,
		Load: [2]string{load0, loadAverage()}}
	if steal1 := steal(); steal0 >= 0 && steal1 >= 0 {
		s.Steal = steal1 - steal0
	}
	at, units, rejected := log()
	s.Calls, s.Rejected = len(at), len(rejected)
	for _, r := range rejected[:min(len(rejected), 5)] {
		s.Refusals = append(s.Refusals, r.Sub(start).Round(time.Millisecond))
	}
	s.Steady, s.Whole = make([]float64, len(quotas)), make([]float64, len(quotas))
	if len(at) == 0 {
		return s, nil
	}
	from := at[0].Add(c.Duration / 3)
	last := at[0]
	sums, whole := make([]float64, len(quotas)), make([]float64, len(quotas))
	for i, t := range at {
		for j := range quotas {
			if j > 0 {
				s.Charged += units[i][j]
			}
			if !t.After(end) {
				whole[j] += units[i][j]
			}
			if t.After(from) && !t.After(end) {
				sums[j] += units[i][j]
			}
		}
		if t.After(from) && !t.After(end) {
			last = t
		}
	}
	for j, q := range quotas {
		if span := last.Sub(from).Minutes(); span > 0 {
			s.Steady[j] = sums[j] / span
		}
		s.Whole[j] = whole[j] / (q.per * c.Duration.Minutes())
		if s.Steady[j]/q.per > s.Steady[s.Binding]/quotas[s.Binding].per {
			s.Binding = j
		}
	}
	return s, nil
}

// workProfile runs c.Workers goroutines that call the provider through a
// pacehttp Transport built from the profile's options, until end.
func workProfile(ctx context.Context, c config, providerURL string, rdb redis.UniversalClient, prefix string, index int, end time.Time, logOut io.Writer) (tally, error) {
	prof, err := profileFor(c)
	if err != nil {
		return tally{}, err
	}
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
	opts := prof.Options()
	opts.Logger = logger
	settle := opts.Settle
	opts.Settle = func(resp *http.Response) (reserve.Cost, error) {
		cost, err := settle(resp)
		if err == nil {
			mu.Lock()
			for u, v := range cost {
				if u != "requests" {
					total.Settled += v
				}
			}
			mu.Unlock()
		}
		return cost, err
	}
	transport, err := pacehttp.New(limiter, opts)
	if err != nil {
		return tally{}, err
	}
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	for w := range c.Workers {
		rng := rand.New(rand.NewPCG(c.Seed, uint64(index*c.Workers+w)))
		wg.Go(func() {
			var t tally
			defer func() {
				mu.Lock()
				total.add(t)
				mu.Unlock()
			}()
			for fail.Load() == nil {
				if err := callProfile(ctx, c, client, providerURL, rng, end, &t); err != nil {
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

// callProfile makes one call: its tokens uniform in [Tokens/5,
// 9*Tokens/5], each part estimated off by up to ±Error (Azure's max_tokens
// is known exactly), the estimate carried in the request's context.
func callProfile(ctx context.Context, c config, client *http.Client, providerURL string, rng *rand.Rand, end time.Time, t *tally) error {
	if !time.Now().Before(end) {
		return errEnd
	}
	lo, hi := float64(c.Tokens)/5, float64(9*c.Tokens)/5
	actual := math.Round(lo + rng.Float64()*(hi-lo))
	off := func(v float64) float64 { return v * (1 + c.Error*(2*rng.Float64()-1)) }
	call, body := callOf(c, actual, off)
	req, err := http.NewRequestWithContext(profile.WithCall(ctx, call), http.MethodPost, providerURL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Host = host
	req.Header.Set("Idempotency-Key", crand.Text())
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		t.Refused++
		return nil
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return fmt.Errorf("llm: provider answered %s: %s", resp.Status, b)
	}
	var ok struct {
		Usage json.RawMessage `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ok); err != nil || len(ok.Usage) == 0 {
		return fmt.Errorf("llm: no usage in the provider's answer (%v)", err)
	}
	t.Calls++
	return nil
}
