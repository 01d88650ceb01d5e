package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// The differential test: random sequences of operations (reservations with
// floors and maximum waits, cancels, settles, pauses, resumes, peeks, stored
// limits set and removed, other policies on the same key, shares) run on a
// real redis-server, through the scripts, and on a Store, through this
// package, with the same client clock. Every reply and every state must be
// the same, byte for byte.

var (
	reserveScript = redis.NewScript(lua.Reserve)
	adjustScript  = redis.NewScript(lua.Adjust)
	pauseScript   = redis.NewScript(lua.Pause)
	resumeScript  = redis.NewScript(lua.Resume)
	peekScript    = redis.NewScript(lua.Peek)
	adminScript   = redis.NewScript(lua.Admin)
)

// policy is a caller's policy as the test draws it.
type policy struct {
	units []string
	bands []Band
}

// args returns ARGV[1..] for p at now (Unix ns) and share, then more.
func (p policy) args(now int64, share Share, more ...any) []any {
	a := []any{strconv.FormatInt(now/1000, 10), strconv.FormatInt(now%1000, 10), share.Arg(), strings.Join(p.units, " "), strconv.Itoa(len(p.bands))}
	for _, b := range p.bands {
		a = append(a, bandArgs(b, strconv.Itoa(b.Unit+1))...)
	}
	return append(a, more...)
}

func bandArgs(b Band, unit string) []any {
	if b.Bucket {
		return []any{b.Name, unit, "b", ff(b.Rate), ff(b.Burst)}
	}
	return []any{b.Name, unit, "w", ff(b.N), strconv.FormatInt(b.LenUS, 10) + ":" + strconv.FormatInt(b.OriginUS, 10)}
}

func ff(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// storedText is a stored limit's text for bands (units by name).
func storedText(mode string, bands []Band, units []string) string {
	parts := []string{mode, strconv.Itoa(len(bands))}
	for _, b := range bands {
		u := "other"
		if b.Unit >= 0 {
			u = units[b.Unit]
		}
		for _, a := range bandArgs(b, u) {
			parts = append(parts, a.(string))
		}
	}
	return strings.Join(parts, " ")
}

// draw returns a random policy: a Limit, or several bands of buckets and
// windows on one or two units.
func draw(r *rand.Rand) policy {
	rates := []float64{0.5, 3, 7, 100, 12345.6}
	if r.IntN(3) == 0 {
		return policy{units: []string{"permits"}, bands: []Band{{Name: "permits", Unit: 0, Bucket: true, Rate: rates[r.IntN(len(rates))], Burst: float64(1 + r.IntN(10))}}}
	}
	p := policy{units: []string{"requests", "tokens"}}
	names := []string{"rps", "quota", "tpm", "day"}
	for i, n := range r.Perm(len(names))[:1+r.IntN(3)] {
		b := Band{Name: names[n], Unit: r.IntN(2)}
		if r.IntN(2) == 0 {
			b.Bucket, b.Rate, b.Burst = true, rates[r.IntN(len(rates))], float64(1+r.IntN(20))
		} else {
			lens := []int64{1000, 200_000, 1_000_000, 3_000_000}
			b.N, b.LenUS = float64(1+r.IntN(20)), lens[r.IntN(len(lens))]
			b.OriginUS = r.Int64N(b.LenUS)
		}
		_ = i
		p.bands = append(p.bands, b)
	}
	return p
}

func drawShare(r *rand.Rand) Share {
	switch r.IntN(6) {
	case 0, 1, 2:
		return Share{}
	case 3:
		// A member pacing alone, maybe between two fleet sizes.
		n := 2 + r.IntN(4)
		s := Share{N: n, Member: r.IntN(n), IsMember: true}
		if r.IntN(2) == 0 {
			s.Also = s.Member + 1 + r.IntN(4)
			if s.Also < 2 {
				s.Also = 2
			}
		}
		return s
	}
	n := 2 + r.IntN(4)
	held := r.Perm(n)[:1+r.IntN(n-1)]
	slices.Sort(held)
	return Share{N: n, Held: held}
}

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
	// Within every band's burst or N.
	for _, b := range p.bands {
		limit := b.Burst
		if !b.Bucket {
			limit = b.N
		}
		if c[b.Unit] > limit {
			c[b.Unit] = limit
		}
	}
	return c
}

// granted is a reservation both sides granted.
type granted struct {
	p      policy
	share  Share
	slotNS int64
	id     string
	cost   []float64
}

func TestDifferential(t *testing.T) {
	srv := redistest.New(t)
	rdb := srv.NewClient(t)
	ctx := context.Background()
	seeds := 60
	if testing.Short() {
		seeds = 10
	}
	if s := os.Getenv("PACER_DIFF_SEEDS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	prefix := redistest.Prefix(t)
	for seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			runDifferential(t, ctx, rdb, prefix+strconv.Itoa(seed), uint64(seed))
		})
	}
}

func runDifferential(t *testing.T, ctx context.Context, rdb *redis.Client, key string, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 21))
	st := NewStore()
	st.noExpiry = true
	keys := []string{key, key + ":limit", key + ":shadow", key + ":done"}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC).UnixNano() + r.Int64N(1e9)
	pols := []policy{draw(r), draw(r)}
	var live []granted
	var log []string
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d, step %d: %s\nsteps:\n%s", seed, len(log), fmt.Sprintf(format, args...), strings.Join(log, "\n"))
	}
	for step := range 150 {
		_ = step
		switch r.IntN(10) {
		case 0:
			now += r.Int64N(3e9)
		case 1, 2:
			now += r.Int64N(1e6)
		default:
			now += r.Int64N(1e5)
		}
		p := pols[0]
		if r.IntN(5) == 0 {
			p = pols[1]
		}
		share := drawShare(r)
		call := Call{Key: key, Now: now, Share: share, Units: p.units, Bands: p.bands}
		switch op := r.IntN(20); {
		case op < 9: // reserve
			m := 1 + r.IntN(3)
			var floor *Floor
			floorArg := ""
			if r.IntN(6) == 0 {
				floor = &Floor{HorizonUS: r.Int64N(3e6)}
				for _, b := range p.bands {
					if !b.Bucket && r.IntN(2) == 0 {
						cur := (now/1000 - b.OriginUS) / b.LenUS
						floor.Windows = append(floor.Windows, WindowUnits{Band: b.Name, W: cur + r.Int64N(3) - 1, Units: float64(r.IntN(4))})
					}
				}
				floorArg = floor.Arg()
			}
			reqs := make([]Request, m)
			more := []any{floorArg, strconv.Itoa(m)}
			for i := range reqs {
				reqs[i] = Request{MaxWaitUS: -1, Cost: drawCost(r, p)}
				if r.IntN(3) == 0 {
					reqs[i].MaxWaitUS = r.Int64N(2e6)
				}
				more = append(more, strconv.FormatInt(reqs[i].MaxWaitUS, 10))
				for _, c := range reqs[i].Cost {
					more = append(more, ff(c))
				}
			}
			log = append(log, fmt.Sprintf("reserve now=%d share=%q policy=%v floor=%q reqs=%v", now, share.Arg(), p.bands, floorArg, reqs))
			res, rerr := reserveScript.Run(ctx, rdb, keys[:3], p.args(now, share, more...)...).Slice()
			grants, state, stored, gerr := st.Reserve(call, floor, reqs)
			if sameError(t, rerr, gerr) {
				continue
			}
			if len(res) != 5+2*m {
				fail("reply %v", res)
			}
			bys := strings.Fields(res[4+2*m].(string))
			if len(bys) != m {
				fail("binding bands %q for %d requests", res[4+2*m], m)
			}
			for i, g := range grants {
				if res[2+2*i].(int64) != g.WaitNS || res[3+2*i].(int64) != g.Seq || bys[i] != g.Band {
					fail("request %d: redis (wait %v, seq %v, band %s), engine %+v", i, res[2+2*i], res[3+2*i], bys[i], g)
				}
				if g.Seq > 0 {
					slot := (now/1000)*1000 + now%1000 + g.WaitNS
					live = append(live, granted{p, share, slot, strconv.FormatInt(g.Seq, 10), reqs[i].Cost})
				}
			}
			if res[2+2*m].(string) != state || res[3+2*m].(string) != stored {
				fail("state/stored: redis %q %q, engine %q %q", res[2+2*m], res[3+2*m], state, stored)
			}
		case op < 12 && len(live) > 0: // cancel or settle
			i := r.IntN(len(live))
			gr := live[i]
			if r.IntN(3) > 0 {
				live = slices.Delete(live, i, i+1)
			}
			var actual []float64
			opName := "cancel"
			more := []any{"cancel", strconv.FormatInt(gr.slotNS/1000, 10), strconv.FormatInt(gr.slotNS%1000, 10), gr.id}
			for _, c := range gr.cost {
				more = append(more, ff(c))
			}
			if r.IntN(2) == 0 {
				opName = "settle"
				more[0] = "settle"
				actual = drawCost(r, gr.p)
				for _, c := range actual {
					more = append(more, ff(c))
				}
			}
			c := Call{Key: key, Now: now, Share: gr.share, Units: gr.p.units, Bands: gr.p.bands}
			log = append(log, fmt.Sprintf("%s now=%d id=%s slot=%d cost=%v actual=%v", opName, now, gr.id, gr.slotNS, gr.cost, actual))
			res, rerr := adjustScript.Run(ctx, rdb, []string{keys[0], keys[1], keys[3]}, gr.p.args(now, gr.share, more...)...).Result()
			applied, gerr := st.Adjust(c, gr.id, gr.slotNS/1000, gr.slotNS%1000, gr.cost, actual)
			if sameError(t, rerr, gerr) {
				continue
			}
			if (res.([]any)[0].(int64) == 1) != applied {
				fail("adjust applied: redis %v, engine %v", res, applied)
			}
		case op < 13: // pause
			d := 1 + r.Int64N(3e6)
			log = append(log, fmt.Sprintf("pause now=%d d=%d share=%q", now, d, share.Arg()))
			res, rerr := pauseScript.Run(ctx, rdb, keys[:2], p.args(now, share, strconv.FormatInt(d, 10))...).Slice()
			end, gerr := st.Pause(call, d)
			if sameError(t, rerr, gerr) {
				continue
			}
			if res[2].(int64) != end {
				fail("pause end: redis %v, engine %v", res[2], end)
			}
		case op < 14: // resume
			log = append(log, fmt.Sprintf("resume now=%d", now))
			res, rerr := resumeScript.Run(ctx, rdb, keys[:2], p.args(now, share)...).Slice()
			was, moved, gerr := st.Resume(call)
			if sameError(t, rerr, gerr) {
				continue
			}
			if res[2].(int64) != was || res[3].(int64) != moved {
				fail("resume: redis %v %v, engine %v %v", res[2], res[3], was, moved)
			}
		case op < 16: // peek
			cost := drawCost(r, p)
			more := []any{}
			for _, c := range cost {
				more = append(more, ff(c))
			}
			log = append(log, fmt.Sprintf("peek now=%d cost=%v share=%q", now, cost, share.Arg()))
			res, rerr := peekScript.Run(ctx, rdb, keys[:2], p.args(now, share, more...)...).Slice()
			wait, pause, bands, gerr := st.Peek(call, cost)
			if sameError(t, rerr, gerr) {
				continue
			}
			if res[2].(int64) != wait || res[3].(int64) != pause || len(res) != 4+4*len(bands) {
				fail("peek: redis %v, engine %v %v %+v", res, wait, pause, bands)
			}
			for i, b := range bands {
				got := []any{b.Name, g17(b.Value), b.WaitNS, b.EndNS}
				if !slices.Equal(res[4+4*i:8+4*i], got) {
					fail("peek band %d: redis %v, engine %v", i, res[4+4*i:8+4*i], got)
				}
			}
		case op < 18: // an operator stores a limit, or removes it
			if r.IntN(3) == 0 {
				log = append(log, "unset")
				_, err := adminScript.Run(ctx, rdb, []string{keys[0], keys[1], keys[2], key + ":history"}, "unset", "", "test", "", 5).Result()
				if err == nil {
					st.SetStored(key, "")
				}
				continue
			}
			q := draw(r)
			// A stored limit's bands charge the callers' units by name.
			sb := q.bands[:1+r.IntN(len(q.bands))]
			for i := range sb {
				sb[i].Unit = r.IntN(len(p.units))
				if r.IntN(2) == 0 {
					sb[i].Name = p.bands[r.IntN(len(p.bands))].Name // replaces a band of the caller's
					sb[i].Unit = p.bands[r.IntN(len(p.bands))].Unit
				}
			}
			seen := map[string]bool{}
			sb = slices.DeleteFunc(sb, func(b Band) bool { d := seen[b.Name]; seen[b.Name] = true; return d })
			mode := "enforce"
			if r.IntN(4) == 0 {
				mode = "shadow"
			}
			text := storedText(mode, sb, p.units)
			log = append(log, "set "+text)
			if _, err := adminScript.Run(ctx, rdb, []string{keys[0], keys[1], keys[2], key + ":history"}, "set", text, "test", "", 5).Result(); err != nil {
				t.Fatalf("admin set %q: %v", text, err)
			}
			st.SetStored(key, text)
		default: // another policy from now on
			pols[r.IntN(2)] = draw(r)
			log = append(log, "new policy")
			continue
		}
		// The states, after every step.
		v, err := rdb.Get(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			v = ""
		} else if err != nil {
			t.Fatal(err)
		}
		gv, _, _ := st.Get(key, now)
		if v != gv {
			fail("state: redis %q, engine %q", v, gv)
		}
	}
}

// sameError reports whether the call failed; both sides must agree.
func sameError(t *testing.T, rerr, gerr error) bool {
	t.Helper()
	if (rerr == nil) != (gerr == nil) {
		t.Fatalf("redis error %v, engine error %v", rerr, gerr)
	}
	return rerr != nil
}
