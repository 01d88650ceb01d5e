package luastore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// The differential test: random sequences of the project's scripts
// (reservations, fair turns, leases, holds and claims, cancels and
// settles, pauses and resumes with and without history, peeks, stored
// limits set and removed, other policies and shares, a member's own among
// them, the state's three formats, lost keys' horizons, bad arguments,
// keys of the wrong type) run on a real redis-server and on a Store, with
// the same arguments and the same client clock (ARGV[2]'s
// "t<now_us>:<now_ns> "). Every reply and error (Reserve's, one string of
// bytes), and after every step every key of the group (type, value byte for
// byte, format 3's binary states among them, expiry), must be the same on
// both.
//
// PACER_LUASTORE_SEED=n replays seed n alone; PACER_LUASTORE_SEEDS=n runs
// n seeds.

var (
	reserveScript = redis.NewScript(lua.Reserve)
	fairScript    = redis.NewScript(lua.Fair)
	adjustScript  = redis.NewScript(lua.Adjust)
	pauseScript   = redis.NewScript(lua.Pause)
	resumeScript  = redis.NewScript(lua.Resume)
	peekScript    = redis.NewScript(lua.Peek)
	leaseScript   = redis.NewScript(lua.Lease)
	claimScript   = redis.NewScript(lua.Claim)
	holdScript    = redis.NewScript(lua.Hold)
	adminScript   = redis.NewScript(lua.Admin)
)

// band is one band of a policy (core.lua's ARGV[3] records).
type band struct {
	name           string
	unit           int // 0-based; -1: a unit the caller does not charge (stored limits)
	bucket         bool
	rate, burst, n float64
	lenUS, origin  int64
}

// policy is a caller's units and bands; text: a Limit sent as text rather
// than as "L" and two doubles (both are core.lua's ARGV[3]).
type policy struct {
	units []string
	bands []band
	text  bool
}

func ff(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func (b band) args(unit string) []any {
	if b.bucket {
		return []any{b.name, unit, "b", ff(b.rate), ff(b.burst)}
	}
	return []any{b.name, unit, "w", ff(b.n), strconv.FormatInt(b.lenUS, 10) + ":" + strconv.FormatInt(b.origin, 10)}
}

// doubles returns v as little-endian doubles (struct "<d" each): a
// Limit's rate and burst, Reserve's requests.
func doubles(v ...float64) string {
	b := make([]byte, 0, 8*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return string(b)
}

// arg returns the policy as ARGV[3]: a Limit (one bucket named permits
// charging permits) as "L" and its rate and burst, unless text; any other
// as text, "<nunits> <units...> <k> <bands...>".
func (p policy) arg() string {
	if !p.text && len(p.units) == 1 && p.units[0] == "permits" && len(p.bands) == 1 && p.bands[0].name == "permits" && p.bands[0].bucket {
		return "L" + doubles(p.bands[0].rate, p.bands[0].burst)
	}
	f := append([]string{strconv.Itoa(len(p.units))}, p.units...)
	f = append(f, strconv.Itoa(len(p.bands)))
	for _, b := range p.bands {
		for _, a := range b.args(strconv.Itoa(b.unit + 1)) {
			f = append(f, a.(string))
		}
	}
	return strings.Join(f, " ")
}

// clock is ARGV[2]'s client clock at now (Unix ns): "t<now_us>:<now_ns> ".
func clock(now int64) string {
	return "t" + strconv.FormatInt(now/1000, 10) + ":" + strconv.FormatInt(now%1000, 10) + " "
}

// coreArgs returns ARGV[1..opi-1]: no deadline, the environment (the
// client clock now, Unix ns, then env: the format, a lost key's horizon,
// the share) and the policy ("" with noBands).
func (p policy) coreArgs(now int64, env string, noBands bool) []any {
	pol := p.arg()
	if noBands {
		pol = ""
	}
	return []any{"", clock(now) + env, pol}
}

// storedText is a stored limit's text (units by name).
func storedText(mode string, bands []band, units []string) string {
	parts := []string{mode, strconv.Itoa(len(bands))}
	for _, b := range bands {
		u := "other"
		if b.unit >= 0 {
			u = units[b.unit]
		}
		for _, a := range b.args(u) {
			parts = append(parts, a.(string))
		}
	}
	return strings.Join(parts, " ")
}

var rates = []float64{0.5, 3, 7, 100, 12345.6}

// drawPolicy returns a Limit (one bucket "permits") or a policy of one to
// three bands, buckets and windows, on one or two units.
func drawPolicy(r *rand.Rand) policy {
	if r.IntN(3) == 0 {
		return policy{units: []string{"permits"}, bands: []band{{name: "permits", bucket: true, rate: rates[r.IntN(len(rates))], burst: float64(1 + r.IntN(10))}}, text: r.IntN(4) == 0}
	}
	p := policy{units: []string{"requests", "tokens"}}
	names := []string{"rps", "quota", "tpm", "day"}
	for _, n := range r.Perm(len(names))[:1+r.IntN(3)] {
		b := band{name: names[n], unit: r.IntN(2)}
		if r.IntN(2) == 0 {
			b.bucket, b.rate, b.burst = true, rates[r.IntN(len(rates))], float64(1+r.IntN(20))
		} else {
			lens := []int64{1000, 200_000, 1_000_000, 3_000_000}
			b.n, b.lenUS = float64(1+r.IntN(20)), lens[r.IntN(len(lens))]
			b.origin = r.Int64N(b.lenUS)
		}
		p.bands = append(p.bands, b)
	}
	return p
}

// drawShare returns ARGV[2] after the clock: the share, the whole ("1"),
// a fleet of n with some ranks held (a group on Redis), or member k's own
// share of a fleet of n ("m n k a": a process pacing locally), maybe also
// within another fleet size a; now and then after a format to write
// ("f1 ", "f2 ", "f3 ") and a lost key's horizon ("!<h2_us>[:<seq>] ").
func drawShare(r *rand.Rand) string {
	s := "1"
	switch r.IntN(6) {
	case 0, 1:
		n := 2 + r.IntN(4)
		held := r.Perm(n)[:1+r.IntN(n-1)]
		slices.Sort(held)
		s = strconv.Itoa(n)
		for _, k := range held {
			s += " " + strconv.Itoa(k)
		}
	case 2:
		n := 2 + r.IntN(4)
		k, a := r.IntN(n), 0
		if r.IntN(2) == 0 {
			a = max(2, k+1+r.IntN(4)) // a fleet size of which k is a rank
		}
		s = fmt.Sprintf("m %d %d %d", n, k, a)
	}
	if r.IntN(8) == 0 {
		h := fmt.Sprintf("!%d", r.Int64N(3e6))
		if r.IntN(3) > 0 {
			h += fmt.Sprintf(":%d", r.IntN(30))
		}
		s = h + " " + s
	}
	switch r.IntN(12) {
	case 0:
		s = "f1 " + s
	case 1, 2:
		s = "f2 " + s
	case 3:
		s = "f3 " + s
	}
	return s
}

// drawCost returns one cost per unit, within every band's burst or N.
func drawCost(r *rand.Rand, p policy) []float64 {
	c := make([]float64, len(p.units))
	for i := range c {
		switch r.IntN(4) {
		case 0:
			c[i] = 0
		case 1:
			c[i] = float64(r.IntN(4)) + 0.25*float64(r.IntN(4))
		default:
			c[i] = 1
		}
	}
	if slices.Max(c) == 0 {
		c[0] = 1
	}
	for _, b := range p.bands {
		limit := b.burst
		if !b.bucket {
			limit = b.n
		}
		if c[b.unit] > limit {
			c[b.unit] = limit
		}
	}
	return c
}

func costArgs(c []float64) []any {
	out := make([]any, len(c))
	for i, x := range c {
		out[i] = ff(x)
	}
	return out
}

// weird are arguments a caller should never send, to hold the scripts'
// checks (tonumber, comparisons with math.huge, struct.unpack of bytes) to
// Redis's.
var weird = []string{"nan", "inf", "-inf", "-1", "1e400", "0x10", " 5", "5 ", "", "abc", "1e5", "010", "-0", "1.5", "2^3", "0",
	"L", "L" + doubles(10), "L" + doubles(math.NaN(), 1), "L" + doubles(10, math.Inf(1)), "L" + doubles(10, 2) + "x",
	doubles(-1), doubles(-1, 1)[:9], doubles(math.NaN(), 1), doubles(-1, math.Inf(-1)), doubles(-2, 1), doubles(-1, 1, 1),
	"\xff", "\xd0\x00", "f4 1", "!x 1", "t1:2", "1e1", " 2", "12345"}

// granted is a reservation both sides granted, for a later adjust.
type granted struct {
	p      policy
	share  string
	slotNS int64
	id     string
	cost   []float64
	hold   string // its hold key, if any
}

// world is one seed's run.
type world struct {
	// retry: a failure while the server expired keys (retryExpired) ends
	// the run to be tried again; expired is the server's count at its start.
	retry   bool
	expired int64
	t       *testing.T
	ctx     context.Context
	rdb     *redis.Client
	st      *Store
	r       *rand.Rand
	seed    uint64
	base    string
	now     int64 // the client clock, Unix ns
	pols    [2]policy
	live    []granted
	log     []string
	allKeys []string
	clock   time.Time // the Store's, which stands still
	stats   map[string]int
}

func (w *world) key(suffix string) string { return w.base + suffix }

var fairSuffixes = []string{":shadow", ":fair", ":fw:u", ":fw:n", ":fw:b", ":fp:u", ":fp:n", ":fp:b", ":weights", ":fx"}

var holders = []string{"j1", "j2", "j3", "j4"}

// retryExpired ends a run that failed while the server expired keys: the
// keys' TTLs run on the server's clock, the scripts on the world's, which
// jumps ahead between steps; on a machine so busy that real time outruns a
// short TTL set after a jump (a hold 100 ms from the world's now), Redis
// forgets a key the store, whose clock stands still, keeps. Such a run
// proves nothing (CI beside a CPU hog: "redis none [], store string").
type retryExpired struct{ msg string }

func (w *world) fail(format string, args ...any) {
	w.t.Helper()
	if w.retry && expiredKeys(w.t, w.rdb) > w.expired {
		panic(retryExpired{fmt.Sprintf(format, args...)})
	}
	w.t.Fatalf("seed %d (replay: PACER_LUASTORE_SEED=%d), step %d: %s\nsteps:\n%s", w.seed, w.seed, len(w.log), fmt.Sprintf(format, args...), strings.Join(w.log, "\n"))
}

// call runs sc on both sides; the replies must be the same. It returns
// Redis's.
func (w *world) call(name string, sc *redis.Script, keys []string, args []any) (any, error) {
	w.t.Helper()
	if w.r.IntN(25) == 0 && len(args) > 2 {
		// A bad argument, anywhere but the clock (ARGV[2]'s part after it
		// may be).
		i := w.r.IntN(len(args))
		args = slices.Clone(args)
		x := weird[w.r.IntN(len(weird))]
		if i == 1 {
			if c, ok := args[1].(string); ok && strings.HasPrefix(c, "t") {
				_, rest, _ := strings.Cut(c, " ")
				x = strings.TrimSuffix(c, rest) + x
			}
		}
		args[i] = x
		name += fmt.Sprintf(" (ARGV[%d] = %q)", i+1, args[i])
	}
	w.log = append(w.log, fmt.Sprintf("%s keys=%q args=%q", name, keys, args))
	rv, rerr := sc.Run(w.ctx, w.rdb, keys, args...).Result()
	sv, serr := sc.Run(w.ctx, w.st, keys, args...).Result()
	if s, ok := sv.(string); ok && strings.Contains(s, `"at_ms":`) {
		// A history entry (admin.lua's reply): its time is each server's.
		if want := fmt.Sprintf(`"at_ms":%d`, w.clock.UnixMilli()); !strings.Contains(s, want) {
			w.fail("%s: store's entry %s, want %s", name, s, want)
		}
		rv, sv = maskAtMs([]any{rv})[0], maskAtMs([]any{sv})[0]
	}
	if d := sameResults(rv, rerr, sv, serr, false); d != "" {
		w.fail("%s: %s", name, d)
	}
	op, _, _ := strings.Cut(name, " ")
	if rerr != nil {
		code, _, _ := strings.Cut(rerr.Error(), " ")
		op += " " + code
	}
	w.stats[op]++
	return rv, rerr
}

func (w *world) reserveArgs(p policy, share string, more ...any) []any {
	return append(p.coreArgs(w.now, share, false), more...)
}

// requests returns Reserve's own arguments, the floor and the requests
// (little-endian doubles: max_wait_us and a cost per unit each), and the
// requests' costs. One request of cost 1 with no maximum wait goes as ""
// or, with no floor, as the common call does: without either argument;
// m > 1 such requests now and then as "<m>". Now and then a floor alone
// ("0": no request).
func (w *world) requests(p policy) ([]any, [][]float64) {
	r := w.r
	m := 1 + r.IntN(3)
	floor := ""
	if r.IntN(6) == 0 {
		floor = strconv.FormatInt(r.Int64N(3e6), 10)
		for _, b := range p.bands {
			if !b.bucket && r.IntN(2) == 0 {
				cur := (w.now/1000 - b.origin) / b.lenUS
				floor += fmt.Sprintf(" %s:%d:%d", b.name, cur+r.Int64N(3)-1, r.IntN(4))
			}
		}
		if r.IntN(3) == 0 {
			return []any{floor, "0"}, nil
		}
	}
	costs := make([][]float64, m)
	var v []float64
	plain := true // every request of cost 1, no maximum wait
	for i := range m {
		maxWait := -1.0
		if r.IntN(3) == 0 {
			maxWait = float64(r.Int64N(2e6))
		}
		costs[i] = drawCost(r, p)
		if r.IntN(3) == 0 {
			costs[i] = make([]float64, len(p.units))
			for u := range costs[i] {
				costs[i][u] = 1 // within every band's burst or N (both >= 1)
			}
		}
		v = append(v, maxWait)
		v = append(v, costs[i]...)
		plain = plain && maxWait == -1 && !slices.ContainsFunc(costs[i], func(c float64) bool { return c != 1 })
	}
	switch {
	case plain && m == 1 && floor == "" && r.IntN(2) == 0:
		return nil, costs
	case plain && m == 1 && r.IntN(2) == 0:
		return []any{floor, ""}, costs
	case plain && m > 1 && r.IntN(2) == 0:
		return []any{floor, strconv.Itoa(m)}, costs // "<m>": m plain requests
	}
	return []any{floor, doubles(v...)}, costs
}

// reserveReply is Reserve's reply decoded (reserve.lua): "<I7HI4" now_us,
// now_ns and m, "<i8i8" wait_ns and seq per request, the state and the
// stored limit each after its "<I4" length, then the binding bands.
type reserveReply struct {
	nowUS, nowNS int64
	waits, seqs  []int64
	state        string
}

// decodeReserve decodes Reserve's reply; false if it is not one.
func decodeReserve(v any) (reserveReply, bool) {
	b, ok := v.(string)
	if !ok || len(b) < 13 {
		return reserveReply{}, false
	}
	le := func(s string) uint64 {
		var x uint64
		for i := len(s) - 1; i >= 0; i-- {
			x = x<<8 | uint64(s[i])
		}
		return x
	}
	r := reserveReply{nowUS: int64(le(b[:7])), nowNS: int64(le(b[7:9]))}
	m, pos := int(le(b[9:13])), 13
	if len(b) < pos+16*m+4 {
		return reserveReply{}, false
	}
	for range m {
		r.waits = append(r.waits, int64(le(b[pos:pos+8])))
		r.seqs = append(r.seqs, int64(le(b[pos+8:pos+16])))
		pos += 16
	}
	n := int(le(b[pos : pos+4]))
	if len(b) < pos+4+n {
		return reserveReply{}, false
	}
	r.state = b[pos+4 : pos+4+n]
	return r, true
}

// noteGrants records the grants of Reserve's or Fair's reply.
func (w *world) noteGrants(p policy, share string, res any, costs [][]float64) {
	d, ok := decodeReserve(res)
	if !ok {
		return
	}
	nowNS := d.nowUS*1000 + d.nowNS
	for i := range costs {
		if i >= len(d.seqs) {
			return
		}
		if d.seqs[i] > 0 {
			w.live = append(w.live, granted{p, share, nowNS + d.waits[i], strconv.FormatInt(d.seqs[i], 10), costs[i], ""})
		}
	}
}

func (w *world) step() {
	r := w.r
	switch r.IntN(10) {
	case 0:
		w.now += r.Int64N(3e9)
	case 1, 2:
		w.now += r.Int64N(1e6)
	default:
		w.now += r.Int64N(1e5)
	}
	p := w.pols[0]
	if r.IntN(5) == 0 {
		p = w.pols[1]
	}
	share := drawShare(r)
	core2 := []string{w.key(""), w.key(":limit")}
	switch op := r.IntN(40); {
	case op < 12:
		more, costs := w.requests(p)
		res, _ := w.call("reserve", reserveScript, append(core2, w.key(":shadow")), w.reserveArgs(p, share, more...))
		w.noteGrants(p, share, res, costs)
	case op < 16:
		lane := 1 + r.IntN(3)
		spec := fmt.Sprintf("%d %s %d %s %d %d %d %d %s", lane, []string{"1", "2", "0.5"}[r.IntN(3)], []int{0, 100000}[r.IntN(2)],
			[]string{"0", "0.25"}[r.IntN(2)], r.IntN(2), 1000000, 1+r.IntN(5), r.Int64N(1e6), []string{"p1", "p2"}[r.IntN(2)])
		tenant := []string{"a", "b", "c", ""}[r.IntN(4)]
		more, costs := w.requests(p)
		keys := core2
		for _, s := range fairSuffixes {
			keys = append(keys, w.key(s))
		}
		res, _ := w.call("fair", fairScript, keys, w.reserveArgs(p, share, append([]any{spec, tenant}, more...)...))
		w.noteGrants(p, share, res, costs)
	case op < 21 && len(w.live) > 0:
		i := r.IntN(len(w.live))
		gr := w.live[i]
		if r.IntN(3) > 0 {
			w.live = slices.Delete(w.live, i, i+1)
		}
		more := []any{"cancel", strconv.FormatInt(gr.slotNS/1000, 10), strconv.FormatInt(gr.slotNS%1000, 10), gr.id}
		more = append(more, costArgs(gr.cost)...)
		if r.IntN(2) == 0 {
			more[0] = "settle"
			more = append(more, costArgs(drawCost(r, gr.p))...)
		}
		keys := append(slices.Clone(core2), w.key(":done"))
		if gr.hold != "" {
			keys = append(keys, gr.hold)
		}
		w.call("adjust", adjustScript, keys, append(gr.p.coreArgs(w.now, gr.share, false), more...))
	case op < 23:
		d := 1 + r.Int64N(3e6)
		keys := core2
		more := []any{strconv.FormatInt(d, 10)}
		if r.IntN(3) == 0 {
			keys = append(slices.Clone(core2), w.key(":history"))
			more = append(more, "pause 1s", "ops", "the provider said so", strconv.Itoa(1+r.IntN(5)), strconv.Itoa(r.IntN(2)))
		}
		w.call("pause", pauseScript, keys, append(p.coreArgs(w.now, share, r.IntN(4) == 0), more...))
	case op < 25:
		keys := core2
		var more []any
		if r.IntN(3) == 0 {
			keys = append(slices.Clone(core2), w.key(":history"))
			more = append(more, "ops", "all clear", strconv.Itoa(1+r.IntN(5)), strconv.Itoa(r.IntN(2)))
		}
		w.call("resume", resumeScript, keys, append(p.coreArgs(w.now, share, r.IntN(4) == 0), more...))
	case op < 27:
		w.call("peek", peekScript, core2, w.reserveArgs(p, share, costArgs(drawCost(r, p))...))
	case op < 29:
		k := 2 + r.IntN(20)
		c := []string{"1", "0.5", "2"}[r.IntN(3)]
		w.call("lease", leaseScript, core2, w.reserveArgs(p, share, strconv.Itoa(k), c))
	case op < 32:
		holder := holders[r.IntN(len(holders))]
		hk := w.key(":hold:" + holder)
		cost := drawCost(r, p)
		more := []any{strconv.Itoa([]int{0, 100000, 10000000}[r.IntN(3)]), strconv.Itoa(r.IntN(2)),
			strconv.Itoa([]int{10000000, 60000000}[r.IntN(2)]), strconv.Itoa([]int{0, 100000}[r.IntN(2)])}
		res, _ := w.call("claim "+holder, claimScript, append(slices.Clone(core2), hk), w.reserveArgs(p, share, append(more, costArgs(cost)...)...))
		if a, ok := res.([]any); ok && len(a) > 5 {
			if seq, _ := a[3].(int64); seq > 0 && a[5].(int64) != 1 {
				slot := a[0].(int64)*1000 + a[1].(int64) + a[2].(int64)
				hold := ""
				if a[4].(int64) == 2 {
					hold = hk
				}
				w.live = append(w.live, granted{p, share, slot, strconv.FormatInt(seq, 10), cost, hold})
			}
		}
	case op < 34:
		m := 1 + r.IntN(3)
		keys := slices.Clone(core2)
		for _, h := range r.Perm(len(holders))[:m] {
			keys = append(keys, w.key(":hold:"+holders[h]))
		}
		more := []any{strconv.Itoa([]int{10000000, 60000000}[r.IntN(2)]), strconv.Itoa([]int{0, 100000}[r.IntN(2)]), strconv.Itoa(m)}
		for range m {
			more = append(more, costArgs(drawCost(r, p))...)
		}
		w.call("hold", holdScript, keys, w.reserveArgs(p, share, more...))
	case op < 37:
		w.admin(p)
	case op < 38:
		w.wrongType()
	default:
		w.pols[r.IntN(2)] = drawPolicy(r)
		w.log = append(w.log, "new policy")
	}
	w.compareKeys()
}

// admin stores a limit, removes it, or stores a tenant's weight (admin.lua).
func (w *world) admin(p policy) {
	r := w.r
	keys := []string{w.key(""), w.key(":limit"), w.key(":shadow"), w.key(":history"), w.key(":weights")}
	switch r.IntN(4) {
	case 0:
		w.call("unset", adminScript, keys, []any{"unset", "", "test", "", "5"})
	case 1:
		weight := []string{"2", "0.5", ""}[r.IntN(3)]
		w.call("weight", adminScript, keys, []any{"weight", weight, "test", "why", "5", []string{"a", "b", "c", ""}[r.IntN(4)]})
	default:
		q := drawPolicy(r)
		sb := q.bands[:1+r.IntN(len(q.bands))]
		for i := range sb {
			sb[i].unit = r.IntN(len(p.units))
			if r.IntN(2) == 0 {
				sb[i].name = p.bands[r.IntN(len(p.bands))].name
				sb[i].unit = p.bands[r.IntN(len(p.bands))].unit
			}
			if r.IntN(8) == 0 {
				sb[i].unit = -1
			}
		}
		seen := map[string]bool{}
		sb = slices.DeleteFunc(sb, func(b band) bool { d := seen[b.name]; seen[b.name] = true; return d })
		mode := "enforce"
		if r.IntN(4) == 0 {
			mode = "shadow"
		}
		w.call("set", adminScript, keys, []any{"set", storedText(mode, sb, p.units), "test", "", "5"})
	}
}

// wrongType puts a value of the wrong type in one of the group's keys that
// is absent, on both sides, runs a step with it there, and deletes it.
func (w *world) wrongType() {
	var absent []string
	for i, d := range dump(w.st, w.allKeys) {
		if d.([]any)[0] == "none" {
			absent = append(absent, w.allKeys[i])
		}
	}
	if len(absent) == 0 {
		return
	}
	k := absent[w.r.IntN(len(absent))]
	src := []string{
		"return redis.call('LPUSH', KEYS[1], 'x')",
		"return redis.call('HSET', KEYS[1], 'f', 'v')",
		"return redis.call('ZADD', KEYS[1], 1, 'm')",
		"return redis.call('SET', KEYS[1], 'garbage')",
	}[w.r.IntN(4)]
	w.raw(src, k)
	w.step()
	w.raw("return redis.call('DEL', KEYS[1])", k)
}

// raw runs src on key k on both sides.
func (w *world) raw(src, k string) {
	w.log = append(w.log, fmt.Sprintf("key %s: %s", k, src))
	r, s := w.rdb.Eval(w.ctx, src, []string{k}), w.st.Eval(w.ctx, src, []string{k})
	if d := same(r, s, false); d != "" {
		w.fail("%s on %s: %s", src, k, d)
	}
}

// dumpScript returns, for each key, its type, its PTTL and its value.
var dumpScript = redis.NewScript(`
local out = {}
for i, k in ipairs(KEYS) do
  local t = redis.call('TYPE', k).ok
  local v = {}
  if t == 'string' then v = {redis.call('GET', k)}
  elseif t == 'hash' then v = redis.call('HGETALL', k)
  elseif t == 'zset' then v = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
  elseif t == 'list' then v = redis.call('LRANGE', k, 0, -1)
  end
  out[i] = {t, redis.call('PTTL', k), v}
end
return out`)

// dump is dumpScript's reply read from the Store's keyspace directly.
func dump(s *Store, keys []string) []any {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tick()
	out := make([]any, len(keys))
	for i, k := range keys {
		e := s.lookup(k)
		v := []any{}
		t := "none"
		if e != nil {
			t = e.kind.String()
			switch e.kind {
			case kindString:
				v = append(v, e.str)
			case kindHash:
				for _, f := range e.hash.fields {
					v = append(v, f, e.hash.values[f])
				}
			case kindZSet:
				for _, it := range e.zset.items {
					v = append(v, it.member, scoreString(it.score))
				}
			case kindList:
				for _, x := range e.list {
					v = append(v, x)
				}
			}
		}
		out[i] = []any{t, s.ttl(k), v}
	}
	return out
}

var atMs = regexp.MustCompile(`"at_ms":\d+`)

// compareKeys compares every key of the group on both sides: type and value
// exactly (a hash as its set of fields: the order HGETALL lists them in is
// not the value; a history entry's at_ms comes from each server's own
// TIME), expiry within the time the seed has run.
func (w *world) compareKeys() {
	w.t.Helper()
	r, err := dumpScript.Run(w.ctx, w.rdb, w.allKeys).Slice()
	if err != nil {
		w.t.Fatal(err)
	}
	s := dump(w.st, w.allKeys)
	for i, k := range w.allKeys {
		rk, sk := r[i].([]any), s[i].([]any)
		rt, st := rk[0], sk[0]
		rv, sv := rk[2].([]any), sk[2].([]any)
		switch rt {
		case "hash":
			rv, sv = sortedPairs(rv), sortedPairs(sv)
		case "list":
			rv, sv = maskAtMs(rv), maskAtMs(sv)
		}
		if rt != st || fmt.Sprint(rv) != fmt.Sprint(sv) {
			w.fail("key %s: redis %v %q, store %v %q", k, rt, rv, st, sv)
		}
		rttl, sttl := rk[1].(int64), sk[1].(int64)
		if (rttl < 0 || sttl < 0) && rttl != sttl || rttl-sttl > 5000 || sttl-rttl > 5000 {
			w.fail("key %s: redis PTTL %d, store %d", k, rttl, sttl)
		}
	}
}

func sortedPairs(v []any) []any {
	pairs := make([]string, 0, len(v)/2)
	for i := 0; i+1 < len(v); i += 2 {
		pairs = append(pairs, fmt.Sprintf("%q=%q", v[i], v[i+1]))
	}
	slices.Sort(pairs)
	out := make([]any, len(pairs))
	for i, p := range pairs {
		out[i] = p
	}
	return out
}

func maskAtMs(v []any) []any {
	out := make([]any, len(v))
	for i, e := range v {
		out[i] = e
		if s, ok := e.(string); ok {
			out[i] = atMs.ReplaceAllString(s, `"at_ms":T`)
		}
	}
	return out
}

func TestDifferential(t *testing.T) {
	srv := redistest.New(t)
	prefix := redistest.Prefix(t)
	seeds := []uint64{}
	n := 8
	if testing.Short() {
		n = 3
	}
	if s := os.Getenv("PACER_LUASTORE_SEEDS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	base := uint64(time.Now().UnixNano())
	for i := range n {
		seeds = append(seeds, base+uint64(i))
	}
	if s := os.Getenv("PACER_LUASTORE_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("PACER_LUASTORE_SEED=%q: %v", s, err)
		}
		seeds = []uint64{v}
	}
	judged := 0
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			// A run that failed while the server expired keys is run again
			// under a fresh prefix (retryExpired), three times in all; a
			// failure with no key expired fails at once. A seed whose three
			// runs all saw keys expire (on a loaded machine the same steps
			// take as long each time: CI beside a CPU hog failed a hold key
			// so three times) is not judged, and says so; the test fails
			// if no seed was judged.
			for attempt := 1; attempt <= 3; attempt++ {
				if runWorldOnce(t, srv.Client, fmt.Sprintf("%s%d:", prefix, attempt), seed, true) {
					judged++
					return
				}
			}
			t.Skipf("seed %d: the server expired keys on its real clock in each of 3 runs (a loaded machine): not judged; replay with PACER_LUASTORE_SEED=%d", seed, seed)
		})
	}
	if judged == 0 {
		t.Fatalf("none of %d seeds judged: the server expired keys in every run", len(seeds))
	}
}

// runWorldOnce is runWorld, and reports false when it ended in
// retryExpired (only with retry).
func runWorldOnce(t *testing.T, rdb *redis.Client, prefix string, seed uint64, retry bool) (ok bool) {
	defer func() {
		if e := recover(); e != nil {
			re, isRetry := e.(retryExpired)
			if !isRetry {
				panic(e)
			}
			t.Logf("seed %d: %s; but the server expired keys meanwhile (its real clock): again", seed, re.msg)
			ok = false
		}
	}()
	runWorld(t, rdb, prefix, seed, retry)
	return true
}

// expiredKeys is the server's count of keys expired (INFO stats).
func expiredKeys(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "expired_keys:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("INFO stats has no expired_keys:\n%s", info)
	return 0
}

func runWorld(t *testing.T, rdb *redis.Client, prefix string, seed uint64, retry bool) {
	r := rand.New(rand.NewPCG(seed, 21))
	// The Store's clock stands still: the scripts take their time from
	// ARGV, and nothing expires on either side within a seed's run (every
	// expiry the scripts set is a second or more).
	frozen := time.Now()
	w := &world{
		t: t, ctx: context.Background(), rdb: rdb, st: New(func() time.Time { return frozen }), r: r, seed: seed, clock: frozen, stats: map[string]int{},
		base: "{" + prefix + strconv.FormatUint(seed, 10) + "}", retry: retry, expired: expiredKeys(t, rdb),
		now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC).UnixNano() + r.Int64N(1e9),
	}
	w.pols = [2]policy{drawPolicy(r), drawPolicy(r)}
	w.allKeys = []string{w.key(""), w.key(":limit"), w.key(":done"), w.key(":history")}
	for _, s := range fairSuffixes {
		w.allKeys = append(w.allKeys, w.key(s))
	}
	for _, h := range holders {
		w.allKeys = append(w.allKeys, w.key(":hold:"+h))
	}
	t.Cleanup(func() { rdb.Del(context.Background(), w.allKeys...) })
	for range 120 {
		w.step()
	}
	if len(w.log) == 0 {
		t.Fatal("no step ran")
	}
	t.Logf("replies: %v", w.stats)
}
