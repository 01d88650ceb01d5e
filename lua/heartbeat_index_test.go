package lua_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// TestHeartbeatIndexesMatch: a fleet told format 3 keeps indexes
// (heartbeat.lua's KEYS[10..12]) and answers its heartbeats from them; the
// replies must be those of a fleet that reads every member (format 2, as
// the release before), whatever happens: members joining with or without
// the rank they ask for, leaving, switching mode, going silent (their
// scores moved back, as a member that stopped beating), forgotten after
// hold_ms, checked and forgotten as suspects, and members of the indexed
// fleet told format 2 for a heartbeat (a switch back: they leave the
// indexes, and the others read every member until they are back), and
// ranks kept for members not back yet (ARGV[8]'s keep). Both
// fleets get the same calls, in lockstep, on one server.
func TestHeartbeatIndexesMatch(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	hb := redis.NewScript(lua.Heartbeat)
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 43))
			prefix := redistest.Prefix(t) + strconv.FormatUint(seed, 10) + ":"
			keys := func(f string) []string {
				k := prefix + f + "{limiters}"
				out := []string{k}
				for _, s := range fleetSuffixes {
					out = append(out, k+s)
				}
				return out
			}
			all, idx := keys("all"), keys("idx")
			s.Client.Set(ctx, all[6], "2", 0)
			s.Client.Set(ctx, idx[6], "3", 0)
			ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
			since := int64(1_700_000_000_000)
			run := func(k []string, args ...any) ([]any, error) {
				return hb.Run(ctx, s.Client, k, args...).Slice()
			}
			fast := 0 // heartbeats the indexed fleet answered from its indexes
			for step := range 400 {
				id := ids[rng.IntN(len(ids))]
				var args []any
				switch op := rng.IntN(20); {
				case op == 0:
					args = []any{id, "leave"}
				case op <= 2:
					// Moved back: silent for secs (held past live_ms,
					// a suspect past suspect_ms, forgotten past hold_ms).
					secs := []int64{10, 30, 50, 130}[rng.IntN(4)]
					now, err := s.Client.Time(ctx).Result()
					if err != nil {
						t.Fatal(err)
					}
					at := float64(now.UnixMilli() - secs*1000)
					for _, k := range [][]string{all, idx} {
						for _, z := range []string{k[0], k[9], k[10]} {
							s.Client.ZAddXX(ctx, z, redis.Z{Score: at, Member: id})
						}
					}
					continue
				case op == 3:
					var gone, alive []string
					for _, x := range ids {
						switch rng.IntN(4) {
						case 0:
							gone = append(gone, x)
						case 1:
							alive = append(alive, x)
						}
					}
					args = []any{id, "check", strings.Join(gone, " "), strings.Join(alive, " ")}
				default:
					mode := []string{"redis", "local"}[rng.IntN(2)]
					since += int64(rng.IntN(3))
					cid := []int{0, 100 + rng.IntN(900)}[rng.IntN(2)]
					want := ""
					if rng.IntN(3) == 0 {
						want = strconv.Itoa(rng.IntN(12))
					}
					if rng.IntN(6) == 0 {
						// Back on a Redis that lost the fleet: ranks kept
						// for members not back yet.
						n := 2 + rng.IntN(8)
						want += fmt.Sprintf(" keep %d %d", []int{60_000, 120_000}[rng.IntN(2)], n)
						for range 1 + rng.IntN(3) {
							want += " " + strconv.Itoa(rng.IntN(n))
						}
					}
					live := []int{60_000, 20_000, 5_000}[rng.IntN(3)]
					args = []any{id, mode, fmt.Sprintf("%d %d %d run1", since, cid, rng.IntN(6)), live, 120_000, 40_000, 180_000, want, ""}
				}
				back := false
				if len(args) > 2 && rng.IntN(12) == 0 {
					// One heartbeat told format 2 in the indexed fleet.
					s.Client.Set(ctx, idx[6], "2", 0)
					back = true
				}
				if w, m := s.Client.ZCard(ctx, idx[9]).Val(), s.Client.ZCard(ctx, idx[0]).Val(); !back && len(args) > 4 && w >= m-1 {
					fast++ // (the member beating joins the writers first)
				}
				ra, erra := run(all, args...)
				ri, erri := run(idx, args...)
				if back {
					s.Client.Set(ctx, idx[6], "3", 0)
				}
				if (erra == nil) != (erri == nil) {
					t.Fatalf("step %d %v: errors %v and %v", step, args, erra, erri)
				}
				if a, i := normal(ra), normal(ri); a != i {
					t.Fatalf("step %d %v:\nreading every member: %s\nindexed:              %s", step, args, a, i)
				}
				for _, k := range []int{0, 3} {
					za, _ := s.Client.ZRangeWithScores(ctx, all[k], 0, -1).Result()
					zi, _ := s.Client.ZRangeWithScores(ctx, idx[k], 0, -1).Result()
					if k == 0 {
						za, zi = members(za), members(zi)
					}
					if fmt.Sprint(za) != fmt.Sprint(zi) {
						t.Fatalf("step %d %v: %s %v, indexed %v", step, args, fleetSuffixes[max(k-1, 0)], za, zi)
					}
				}
			}
			if fast < 100 {
				t.Errorf("%d heartbeats answered from the indexes, want 100 or more of 400 steps", fast)
			}
		})
	}
}

// normal is a heartbeat reply without what depends on the clock (now_ms)
// or on the format told, with held_ranks sorted and suspects in order.
func normal(r []any) string {
	if len(r) < 12 {
		return fmt.Sprint(len(r))
	}
	held := slices.Clone(r[5].([]any))
	slices.SortFunc(held, func(x, y any) int { return int(x.(int64) - y.(int64)) })
	var sus []string
	ss := r[6].([]any)
	for i := 0; i+2 < len(ss); i += 3 {
		sus = append(sus, fmt.Sprint(ss[i:i+3]))
	}
	slices.Sort(sus)
	return fmt.Sprint(r[1:5], held, sus, r[7:10], r[11:])
}

// members are a sorted set's members alone.
func members(zs []redis.Z) []redis.Z {
	out := make([]redis.Z, len(zs))
	for i, z := range zs {
		out[i] = redis.Z{Member: z.Member}
	}
	slices.SortFunc(out, func(x, y redis.Z) int { return strings.Compare(x.Member.(string), y.Member.(string)) })
	return out
}

// TestHeartbeatIndexesBesideEarlierRelease: in a fleet switched to format 3
// with a member of the release before in it (`pacer format 3 --force`: it
// passes 8 keys, and keeps no indexes), a member of this release answers
// as one that reads every member: the rank the earlier member took, a hole
// in the indexes a moment before, is taken, not a hole; and once that
// member is forgotten, the indexes are right again.
func TestHeartbeatIndexesBesideEarlierRelease(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	hb := redis.NewScript(lua.Heartbeat)
	k := redistest.Prefix(t) + "{limiters}"
	keys := []string{k}
	for _, x := range fleetSuffixes {
		keys = append(keys, k+x)
	}
	s.Client.Set(ctx, keys[6], "3", 0)
	beat := func(keys []string, id, mode string) []any {
		t.Helper()
		r, err := hb.Run(ctx, s.Client, keys, id, mode, "1700000000000 0 0", 60_000, 120_000, 60_000, 180_000, "", "").Slice()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, id := range []string{"w1", "w2", "w3"} {
		beat(keys, id, "redis")
	}
	beat(keys, "w2", "leave")
	if r := beat(keys, "w1", "redis"); fmt.Sprint(r[3:5], r[9]) != "[0 3] [1]" {
		t.Fatalf("w1 after w2 left: rank, n %v, holes %v; want [0 3], [1]", r[3:5], r[9])
	}
	// The earlier release's member takes the smallest free rank, 1.
	if r := beat(keys[:8], "old", "redis"); r[3] != int64(1) {
		t.Fatalf("the earlier member's rank %v, want 1", r[3])
	}
	if r := beat(keys, "w1", "redis"); fmt.Sprint(r[9]) != "[]" {
		t.Errorf("w1 beside the earlier member: holes %v, want [] (rank 1 is the earlier member's)", r[9])
	}
	beat(keys[:8], "old", "leave")
	if r := beat(keys, "w3", "redis"); fmt.Sprint(r[9]) != "[1]" {
		t.Errorf("w3 after the earlier member left: holes %v, want [1]", r[9])
	}
	if r := beat(keys, "w4", "redis"); r[3] != int64(1) || fmt.Sprint(r[9]) != "[]" {
		t.Errorf("the newcomer: rank %v, holes %v; want 1, []", r[3], r[9])
	}
}
