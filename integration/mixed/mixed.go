// Package mixed runs a mixed fleet: Go processes (package reserve) and
// Python processes (clients/python) pacing one key on one redis-server,
// each call made to one fake LLM provider (internal/provider), through
// Redis stopped and restarted empty and a pause of the key. It judges the
// run on the calls' slots: no interval of the run holds more than a band
// allows (burst + rate × (T + SlotEps), as integration/combo judges), and
// no slot lies inside the pause (after PauseLead); and it gives the figures the provider saw
// (the busiest 100 ms and 1 s, calls per second).
//
// integration/cmd/pacermixed prints the figures; integration's
// TestMixedFleet asserts the invariants.
package mixed

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/pacer-go/pacer/lua"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// childEnv carries a Go child's job (Main).
const childEnv = "PACER_MIXED_CHILD"

// SlotEps is how far apart the slots of Redis's clock and of a process's
// estimate of it may be placed for one instant (integration/combo's).
const SlotEps = 200 * time.Microsecond

// Config is a run.
type Config struct {
	Go, Python int           // processes of each
	Threads    int           // callers per process
	Rate       float64       // requests per second, burst 1
	Bands      bool          // two bands: also TokenRate tokens per second (burst TokenBurst), each call reserving 80 and settling its usage
	Length     time.Duration // the run
	StopAt     time.Duration // Redis stopped (0: never)
	RestartAt  time.Duration // and restarted empty
	PauseAt    time.Duration // the key paused for PauseFor (0: never)
	PauseFor   time.Duration
	Python3    string // the interpreter; default /usr/bin/python3
	Repo       string // the repository's root (clients/python, lua/)
}

// TokenRate and TokenBurst are the token band of Config.Bands.
const (
	TokenRate  = 20000
	TokenBurst = 2000
	tokenEst   = 80
)

// job is a child's.
type job struct {
	Name, RedisURL, Provider, Key string
	Rate                          float64
	Bands                         bool
	Threads                       int
	Start, End                    float64 // Unix seconds
	Seed                          uint64
}

// Call is one call a child made: its slot (Unix ns, on Redis's clock or
// the process's estimate of it), whether the local fallback granted it,
// the tokens it used.
type Call struct {
	Proc   string `json:"proc"`
	Slot   int64  `json:"slot"`
	Local  bool   `json:"local"`
	Tokens int    `json:"tokens"`
	Fire   int64  `json:"fire"` // when it called the provider, Unix ns
}

// Result is a run's.
type Result struct {
	Config              Config
	Start               time.Time
	Calls               []Call         // by slot
	Arrivals            []provider.Use // the provider's log
	Stopped, Restarted  time.Time
	PauseFrom, PauseEnd time.Time
	Errors              []string // the children's
}

// Main runs a Go child when childEnv holds its job, and exits; else it
// returns. Call it first in main or TestMain.
func Main() {
	spec := os.Getenv(childEnv)
	if spec == "" {
		return
	}
	var j job
	err := json.Unmarshal([]byte(spec), &j)
	if err == nil {
		err = goChild(j)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mixed child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func policy(j job) reserve.Policy {
	p := reserve.Policy{{Name: "rps", Unit: "requests", Limit: reserve.Limit{Rate: j.Rate, Burst: 1}}}
	if j.Bands {
		p = append(p, reserve.Band{Name: "tps", Unit: "tokens", Limit: reserve.Limit{Rate: TokenRate, Burst: TokenBurst}})
	}
	return p
}

// goChild is a Go process of the fleet: Threads goroutines, each {reserve;
// sleep to the slot; call the provider; settle}, from Start to End.
func goChild(j job) error {
	opt, err := redis.ParseURL(j.RedisURL)
	if err != nil {
		return err
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = 500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	lim, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		return err
	}
	defer lim.Close()
	start, end := unixTime(j.Start), unixTime(j.End)
	time.Sleep(time.Until(start))
	var mu sync.Mutex
	var calls []Call
	var wg sync.WaitGroup
	for g := range j.Threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(j.Seed, uint64(g)))
			client := &http.Client{Timeout: 5 * time.Second}
			for time.Now().Before(end) {
				ctx, cancel := context.WithDeadline(context.Background(), end)
				cost := reserve.Cost{"requests": 1}
				if j.Bands {
					cost["tokens"] = tokenEst
				}
				r, err := lim.ReserveN(ctx, reserve.Request{Key: j.Key, Policy: policy(j), Cost: cost})
				if err == nil {
					err = r.Sleep(ctx)
				}
				cancel()
				if err != nil {
					continue // the run's end
				}
				fire := time.Now().UnixNano()
				used := 1
				if j.Bands {
					used = 20 + rng.IntN(tokenEst-20+1)
				}
				if err := post(client, j, used); err != nil {
					fmt.Fprintln(os.Stderr, "provider:", err)
				}
				if j.Bands {
					_ = r.Settle(context.Background(), reserve.Cost{"tokens": float64(used)})
				}
				mu.Lock()
				calls = append(calls, Call{Proc: j.Name, Slot: grantedSlot(r), Local: r.Local(), Tokens: used, Fire: fire})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return json.NewEncoder(os.Stdout).Encode(calls)
}

// grantedSlot returns r's slot on Redis's clock (estimated when local),
// read from the unexported field as integration/combo reads it: Time is
// the local time the reply arrived plus the wait, later than the slot by
// the reply's way back, which a loaded machine makes milliseconds.
func grantedSlot(r *reserve.Reservation) int64 {
	f := reflect.ValueOf(r).Elem().FieldByName("slotNS")
	if !f.IsValid() || f.Kind() != reflect.Int64 || f.Int() == 0 {
		return r.Time().UnixNano()
	}
	return f.Int()
}

func post(c *http.Client, j job, tokens int) error {
	req, err := http.NewRequest(http.MethodPost, j.Provider, strings.NewReader(`{"tokens": `+strconv.Itoa(tokens)+`}`))
	if err != nil {
		return err
	}
	req.Host = j.Key
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func unixTime(s float64) time.Time {
	sec, frac := math.Modf(s)
	return time.Unix(int64(sec), int64(frac*1e9))
}

// Run runs the fleet.
func Run(ctx context.Context, c Config) (*Result, error) {
	if c.Python3 == "" {
		c.Python3 = "/usr/bin/python3"
	}
	srv, err := redisproc.Start(redisproc.Spec{})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	llm, err := provider.StartLLM(provider.LLMOptions{RPM: 1 << 30, TPM: 1 << 30})
	if err != nil {
		return nil, err
	}
	defer llm.Close()
	const key = "mixed"
	start := time.Now().Add(2500 * time.Millisecond) // the Python processes start in about 0.3 s
	res := &Result{Config: c, Start: start}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Length+time.Minute)
	defer cancel()
	type child struct {
		cmd    *exec.Cmd
		out    bytes.Buffer
		errOut bytes.Buffer
	}
	var children []*child
	for i := range c.Go + c.Python {
		j := job{RedisURL: srv.URL(), Provider: llm.URL(), Key: key, Rate: c.Rate, Bands: c.Bands, Threads: c.Threads,
			Start: float64(start.UnixNano()) / 1e9, End: float64(start.Add(c.Length).UnixNano()) / 1e9, Seed: uint64(i + 1)}
		spec, _ := json.Marshal(&j)
		ch := &child{}
		if i < c.Go {
			j.Name = "go-" + strconv.Itoa(i)
			spec, _ = json.Marshal(&j)
			ch.cmd = exec.CommandContext(ctx, self, "-test.run=^$")
			ch.cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
		} else {
			j.Name = "py-" + strconv.Itoa(i-c.Go)
			spec, _ = json.Marshal(&j)
			ch.cmd = exec.CommandContext(ctx, c.Python3, filepath.Join(c.Repo, "clients", "python", "tests", "fleet_child.py"))
			ch.cmd.Env = append(os.Environ(), "PACER_MIXED_JOB="+string(spec))
		}
		ch.cmd.Stdout, ch.cmd.Stderr = &ch.out, &ch.errOut
		if err := ch.cmd.Start(); err != nil {
			return nil, err
		}
		children = append(children, ch)
	}
	at := func(d time.Duration) { time.Sleep(time.Until(start.Add(d))) }
	type action struct {
		at time.Duration
		do func()
	}
	var actions []action
	if c.StopAt > 0 {
		actions = append(actions, action{c.StopAt, func() { srv.Stop(); res.Stopped = time.Now() }},
			action{c.RestartAt, func() {
				if err := srv.Restart(); err != nil {
					res.Errors = append(res.Errors, "restart: "+err.Error())
				}
				res.Restarted = time.Now()
			}})
	}
	if c.PauseAt > 0 {
		actions = append(actions, action{c.PauseAt, func() {
			if err := pause(ctx, srv.URL(), key, c.PauseFor, res); err != nil {
				res.Errors = append(res.Errors, "pause: "+err.Error())
			}
		}})
	}
	slices.SortFunc(actions, func(a, b action) int { return int(a.at - b.at) })
	for _, a := range actions {
		at(a.at)
		a.do()
	}
	for _, ch := range children {
		err := ch.cmd.Wait()
		if err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("%v: %v: %s", ch.cmd.Args, err, tail(ch.errOut.String())))
			continue
		}
		var calls []Call
		sc := bufio.NewScanner(&ch.out)
		sc.Buffer(nil, 1<<26)
		for sc.Scan() {
			var cs []Call
			if err := json.Unmarshal(sc.Bytes(), &cs); err == nil {
				calls = append(calls, cs...)
			}
		}
		res.Calls = append(res.Calls, calls...)
	}
	slices.SortFunc(res.Calls, func(a, b Call) int { return int(a.Slot - b.Slot) })
	res.Arrivals, _ = llm.Uses(key)
	return res, nil
}

// pause pauses key for d as an operator would: Pause with no band (the
// policy ""), on server time, writing format 1 (docs/protocol.md, Pause).
func pause(ctx context.Context, url, key string, d time.Duration, res *Result) error {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	k := "pacer:{" + key + "}"
	v, err := redis.NewScript(lua.Pause).Run(ctx, rdb, []string{k, k + ":limit"},
		"", "f1 1", "", strconv.FormatInt(d.Microseconds(), 10)).Slice()
	if err != nil {
		return err
	}
	nowUS, nowNS, left := v[0].(int64), v[1].(int64), v[2].(int64)
	res.PauseFrom = time.Unix(0, nowUS*1000+nowNS)
	res.PauseEnd = res.PauseFrom.Add(time.Duration(left))
	return nil
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}

// An Excess is an interval over a band's bound.
type Excess struct {
	Band         string
	From, To     int64 // slots, Unix ns
	Units, Bound float64
}

// Excesses returns, per band, the worst interval between two slots that
// holds more than burst + rate × (T + SlotEps) (none: the run kept the
// limit).
func (r *Result) Excesses() []Excess {
	var out []Excess
	check := func(band string, rate, burst float64, units func(Call) float64) {
		// For every j, the worst i <= j: max of (U_j - U_{i-1}) - rate × (s_j - s_i).
		var u float64
		bestI, bestV := -1, math.Inf(-1) // max over i of -(U_{i-1}) + rate × s_i
		worst := Excess{Band: band}
		over := math.Inf(-1)
		for j, c := range r.Calls {
			s := float64(c.Slot) / 1e9
			if v := -u + rate*s; v > bestV {
				bestI, bestV = j, v
			}
			u += units(c)
			excess := u + bestV - rate*s - (burst + rate*SlotEps.Seconds())
			if excess > over {
				over = excess
				from := r.Calls[bestI].Slot
				worst = Excess{Band: band, From: from, To: c.Slot, Units: u + bestV - rate*float64(from)/1e9,
					Bound: burst + rate*(float64(c.Slot-from)/1e9+SlotEps.Seconds())}
			}
		}
		if over > 1e-9 {
			out = append(out, worst)
		}
	}
	check("rps", r.Config.Rate, 1, func(Call) float64 { return 1 })
	if r.Config.Bands {
		check("tps", TokenRate, TokenBurst, func(c Call) float64 { return float64(c.Tokens) })
	}
	return out
}

// PauseLead is how long after the pause was made a slot may still lie in
// it (integration/combo's): a sleeper reads the key for a pause 2 ms
// before its slot (Go's PreciseWake, the Python client's precheck), and
// the pause's reply comes back after it was made.
const PauseLead = 10 * time.Millisecond

// InPause returns the slots that lie inside the pause, after PauseLead.
func (r *Result) InPause() []Call {
	var out []Call
	for _, c := range r.Calls {
		if c.Slot > r.PauseFrom.Add(PauseLead).UnixNano() && c.Slot < r.PauseEnd.UnixNano() {
			out = append(out, c)
		}
	}
	return out
}

// ArrivalsInPause is how many calls reached the provider inside the pause,
// after its first grace (calls past their last check when it was made).
func (r *Result) ArrivalsInPause(grace time.Duration) int {
	n := 0
	for _, a := range r.Arrivals {
		if a.At.After(r.PauseFrom.Add(grace)) && a.At.Before(r.PauseEnd) {
			n++
		}
	}
	return n
}

// Busiest is the most calls (and tokens) the provider saw in any window of w.
func (r *Result) Busiest(w time.Duration) (calls, tokens int) {
	return busiest(r.Arrivals, w)
}

// BusiestIn is Busiest over the calls that arrived in [from, to) after
// the start.
func (r *Result) BusiestIn(w, from, to time.Duration) (calls, tokens int) {
	var in []provider.Use
	for _, a := range r.Arrivals {
		if d := a.At.Sub(r.Start); d >= from && d < to {
			in = append(in, a)
		}
	}
	return busiest(in, w)
}

func busiest(uses []provider.Use, w time.Duration) (calls, tokens int) {
	j, tok := 0, 0
	for i, a := range uses {
		tok += a.Tokens
		for uses[j].At.Add(w).Compare(a.At) <= 0 {
			tok -= uses[j].Tokens
			j++
		}
		calls, tokens = max(calls, i-j+1), max(tokens, tok)
	}
	return calls, tokens
}

// BusiestFires is the busiest window of w of the calls' fire times, by
// process: where the provider's busiest window came from.
func (r *Result) BusiestFires(w time.Duration) map[string]int {
	fires := slices.Clone(r.Calls)
	slices.SortFunc(fires, func(a, b Call) int { return int(a.Fire - b.Fire) })
	best, bi, bj, j := 0, 0, 0, 0
	for i := range fires {
		for fires[j].Fire+int64(w) <= fires[i].Fire {
			j++
		}
		if i-j+1 > best {
			best, bi, bj = i-j+1, j, i
		}
	}
	out := map[string]int{}
	for _, c := range fires[bi : bj+1] {
		out[c.Proc]++
	}
	return out
}

// PerSecond is the calls the provider saw in each second from the start.
func (r *Result) PerSecond() []int {
	out := make([]int, int(r.Config.Length/time.Second))
	for _, a := range r.Arrivals {
		if i := int(a.At.Sub(r.Start) / time.Second); i >= 0 && i < len(out) {
			out[i]++
		}
	}
	return out
}

// ByProc is each process's calls, and how many the local fallback granted.
func (r *Result) ByProc() map[string][2]int {
	out := map[string][2]int{}
	for _, c := range r.Calls {
		v := out[c.Proc]
		v[0]++
		if c.Local {
			v[1]++
		}
		out[c.Proc] = v
	}
	return out
}

// Repo returns the repository's root, found from the working directory
// upward (the directory holding clients/python and lua/).
func Repo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "clients", "python", "pacer")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("mixed: no clients/python above the working directory")
		}
		dir = parent
	}
}
