package reserve_test

import (
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/lua"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The scripts of state format 1, as released before format 2.
var (
	//go:embed testdata/format1/core.lua
	format1Core string
	//go:embed testdata/format1/reserve.lua
	format1Reserve string
	//go:embed testdata/format1/adjust.lua
	format1Adjust string
)

// upgradePolicy is a policy as the format 1 scripts' ARGV[4...] give it,
// and as the current scripts' ARGV[3].
type upgradePolicy struct {
	name   string
	units  string // format 1's ARGV[4]
	bands  []any  // format 1's ARGV[5...]
	policy string // the current ARGV[3]
	costs  func(rng *rand.Rand) []string
}

var upgradePolicies = []upgradePolicy{
	{"Limit", "permits", []any{"1", "permits", "1", "b", "3", "4"}, "L" + doubles(3, 4), func(rng *rand.Rand) []string {
		return []string{strconv.Itoa(1 + rng.IntN(4))}
	}},
	{"three bands", "requests tokens", []any{"3", "requests", "1", "b", "7", "3", "tokens", "2", "b", "1000.5", "2000", "daily", "1", "w", "40", "5000000:1234"},
		"2 requests tokens 3 requests 1 b 7 3 tokens 2 b 1000.5 2000 daily 1 w 40 5000000:1234",
		func(rng *rand.Rand) []string {
			return []string{strconv.Itoa(rng.IntN(3)), strconv.FormatFloat(rng.Float64()*700, 'f', 3, 64)}
		}},
}

// doubles returns xs as little-endian doubles, as the current scripts read
// a Limit's policy and Reserve's requests.
func doubles(xs ...float64) string {
	var b []byte
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return string(b)
}

// TestUpgradeFormat1 runs the scripts of state format 1 and the current
// ones side by side, at the same (client clock) times: key old only ever
// sees the old scripts, key cur only the current ones (writing format 3,
// and every fourth call format 2), and before each call key copy gets
// old's format 1 state and the current script. Every reply must be the
// same, to the ns: the current scripts read format 1 exactly (a fleet
// mid-deploy), and their own formats 2 and 3 lose nothing. An old script
// meeting a format 2 or 3 state refuses it (PACER_WRONGTYPE) and changes
// nothing.
func TestUpgradeFormat1(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	oldReserve := redis.NewScript(format1Core + format1Reserve)
	oldAdjust := redis.NewScript(format1Core + format1Adjust)
	newReserve := redis.NewScript(lua.Reserve)
	newAdjust := redis.NewScript(lua.Adjust)
	prefix := redistest.Prefix(t)
	for _, pol := range upgradePolicies {
		t.Run(pol.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(len(pol.name))))
			old, cp, curKey := prefix+"{old-"+pol.name+"}", prefix+"{copy-"+pol.name+"}", prefix+"{cur-"+pol.name+"}"
			// v1: the current scripts asked to write format 1 (ARGV[3]
			// "f1 1"), as a fleet mid-upgrade does; v1cp gets its state
			// before each call, for the old scripts.
			v1, v1cp := prefix+"{v1-"+pol.name+"}", prefix+"{v1copy-"+pol.name+"}"
			keysOf := func(k string) []string { return []string{k, k + ":limit", k + ":shadow"} }
			now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			// head is format 1's ARGV up to the operation's own; cur the
			// current scripts', writing format f (f1 1: format 1).
			head := func() []any {
				a := []any{strconv.FormatInt(now.UnixMicro(), 10), strconv.Itoa(now.Nanosecond() % 1000), "1", pol.units}
				return append(a, pol.bands...)
			}
			cur := func(f string, own ...any) []any {
				env := "t" + strconv.FormatInt(now.UnixMicro(), 10) + ":" + strconv.Itoa(now.Nanosecond()%1000) + " " + f
				return append([]any{"", env, pol.policy}, own...)
			}
			type granted struct {
				slotNS, seq int64
				costs       []string
			}
			var live []granted
			refused, grants := 0, 0
			for step := range 300 {
				now = now.Add(time.Duration(rng.IntN(400_000_000)) + time.Duration(rng.IntN(1000)))
				state, err := s.Client.Get(ctx, old).Result()
				if err == nil {
					require.True(t, strings.HasPrefix(state, "1 "), "old key state %q", state)
					require.NoError(t, s.Client.Copy(ctx, old, cp, 0, true).Err())
				} else {
					require.ErrorIs(t, err, redis.Nil)
					require.NoError(t, s.Client.Del(ctx, cp).Err())
				}
				if curState, err := s.Client.Get(ctx, curKey).Result(); err == nil && rng.IntN(8) == 0 {
					// An old client meets a format 2 or 3 state.
					require.False(t, strings.HasPrefix(curState, "1 "), "current key state %q", curState)
					args := append(head(), "", "1", "-1")
					args = append(args, anys(pol.costs(rng))...)
					err := oldReserve.Run(ctx, s.Client, keysOf(curKey), args...).Err()
					require.ErrorContains(t, err, "PACER_WRONGTYPE", "step %d: an old script on state %q", step, curState)
					after, _ := s.Client.Get(ctx, curKey).Result()
					require.Equal(t, curState, after, "step %d: the refused old call changed the state", step)
					refused++
				}
				curFormat := "1" // format 3
				if step%4 == 0 {
					curFormat = "f2 1"
				}
				if v1State, err := s.Client.Get(ctx, v1).Result(); err == nil {
					require.True(t, strings.HasPrefix(v1State, "1 "), "step %d: the format 1 writer wrote %q", step, v1State)
					require.NoError(t, s.Client.Copy(ctx, v1, v1cp, 0, true).Err())
				} else {
					require.ErrorIs(t, err, redis.Nil)
					require.NoError(t, s.Client.Del(ctx, v1cp).Err())
				}
				where := fmt.Sprintf("step %d (format 1 state %q)", step, state)
				if len(live) > 0 && rng.IntN(4) == 0 {
					// Cancel or settle a live reservation.
					i := rng.IntN(len(live))
					g := live[i]
					live = append(live[:i], live[i+1:]...)
					own := []any{"cancel", strconv.FormatInt(g.slotNS/1000, 10), strconv.FormatInt(g.slotNS%1000, 10), strconv.FormatInt(g.seq, 10)}
					own = append(own, anys(g.costs)...)
					if rng.IntN(2) == 0 {
						own[0] = "settle"
						own = append(own, anys(pol.costs(rng))...)
					}
					args := append(head(), own...)
					a, err1 := oldAdjust.Run(ctx, s.Client, keysOf(old), args...).Result()
					b, err2 := newAdjust.Run(ctx, s.Client, keysOf(cp), cur(curFormat, own...)...).Result()
					c, err3 := newAdjust.Run(ctx, s.Client, keysOf(curKey), cur(curFormat, own...)...).Result()
					// The new script's reply also carries the state: compare
					// what both say, whether it was applied.
					b, c = applied(b), applied(c)
					require.Equal(t, fmt.Sprint(a, err1), fmt.Sprint(b, err2), "%s: %v on format 1", where, own[0])
					require.Equal(t, fmt.Sprint(a, err1), fmt.Sprint(c, err3), "%s: %v on the current formats", where, own[0])
					d, err4 := newAdjust.Run(ctx, s.Client, keysOf(v1), cur("f1 1", own...)...).Result()
					e, err5 := oldAdjust.Run(ctx, s.Client, keysOf(v1cp), args...).Result()
					d = applied(d)
					require.Equal(t, fmt.Sprint(a, err1), fmt.Sprint(d, err4), "%s: %v writing format 1", where, own[0])
					require.Equal(t, fmt.Sprint(a, err1), fmt.Sprint(e, err5), "%s: %v, old script on the format 1 writer's state", where, own[0])
					continue
				}
				m := 1 + rng.IntN(3)
				args := append(head(), "", strconv.Itoa(m))
				var costs [][]string
				var reqs []float64
				for range m {
					c := pol.costs(rng)
					costs = append(costs, c)
					args = append(args, "-1")
					args = append(args, anys(c)...)
					reqs = append(reqs, -1)
					for _, x := range c {
						v, err := strconv.ParseFloat(x, 64)
						require.NoError(t, err)
						reqs = append(reqs, v)
					}
				}
				own := []any{"", doubles(reqs...)}
				a, err1 := oldReserve.Run(ctx, s.Client, keysOf(old), args...).Result()
				b, err2 := newReserve.Run(ctx, s.Client, keysOf(cp), cur(curFormat, own...)...).Result()
				c, err3 := newReserve.Run(ctx, s.Client, keysOf(curKey), cur(curFormat, own...)...).Result()
				require.NoError(t, err1, where)
				require.NoError(t, err2, where)
				require.NoError(t, err3, where)
				// The current reply is one string of bytes: its times and
				// grants must be the old reply's.
				grantsOf := func(v any) []any {
					b, ok := v.(string)
					require.True(t, ok, "%s: a reply %#v", where, v)
					r, ok := reserve.DecodeReserve(b)
					require.True(t, ok, "%s: a reply %q", where, b)
					out := []any{r.NowUS, r.NowNS}
					for i := range r.Waits {
						out = append(out, r.Waits[i], r.Seqs[i])
					}
					return out
				}
				require.Equal(t, a, grantsOf(b), "%s: reserve on format 1", where)
				require.Equal(t, a, grantsOf(c), "%s: reserve on the current formats", where)
				d, err4 := newReserve.Run(ctx, s.Client, keysOf(v1), cur("f1 1", own...)...).Result()
				e, err5 := oldReserve.Run(ctx, s.Client, keysOf(v1cp), args...).Result()
				require.NoError(t, err4, where)
				require.NoError(t, err5, where)
				require.Equal(t, a, grantsOf(d), "%s: reserve writing format 1", where)
				require.Equal(t, a, e, "%s: old script on the format 1 writer's state", where)
				reply := a.([]any)
				base := reply[0].(int64)*1000 + reply[1].(int64)
				for r := range m {
					if seq := reply[3+2*r].(int64); seq > 0 {
						live = append(live, granted{base + reply[2+2*r].(int64), seq, costs[r]})
						grants++
					}
				}
			}
			assert.Greater(t, refused, 10, "too few old calls on format 2")
			assert.Greater(t, grants, 200, "too few grants to test anything")
		})
	}
}

func anys(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// applied is an adjust.lua reply's applied part (this release's reply is
// [applied, state]; format 1's scripts answer applied alone).
func applied(v any) any {
	if reply, ok := v.([]any); ok && len(reply) == 2 {
		return reply[0]
	}
	return v
}
