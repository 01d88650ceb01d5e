package lua_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/lua"
)

// TestHeartbeatKeepsRanks: a member back from an outage on a Redis that
// lost the fleet (restarted empty) keeps the ranks of the members it
// remembers that are not back yet (heartbeat.lua's ARGV[8] "keep"). While
// kept, a newcomer takes no such rank, and each kept rank no member holds
// is held in every reply, on the remembered fleet's size (held_n). A
// member back asks for its own and gets it. Kept ranks expire when no
// heartbeat renews them. Before, the combination runner's seed 49: a
// newcomer took the rank of a member paused while it paced locally, heard
// of no member held, and took the whole key on Redis beside it. For the
// fleet read member by member (format 2) and from its indexes (format 3).
func TestHeartbeatKeepsRanks(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	hb := redis.NewScript(lua.Heartbeat)
	for _, format := range []string{"2", "3"} {
		t.Run("format="+format, func(t *testing.T) {
			keys := fleetOf(t, s.Client, redistest.Prefix(t)+format+"{limiters}", format)
			type reply struct {
				rank, n, heldN int64
				held           []int64
			}
			beat := func(id, want string) reply {
				t.Helper()
				r, err := hb.Run(ctx, s.Client, keys, id, "redis", "1700000000000 0 0", 2000, 60_000, 1100, 180_000, want, "").Slice()
				require.NoError(t, err)
				require.Len(t, r, 12)
				var held []int64
				for _, h := range r[5].([]any) {
					held = append(held, h.(int64))
				}
				// Every held rank here is a kept one, on the keep's size:
				// the only size held.
				sizes, heldN := r[11].([]any), r[7].(int64)
				if heldN > 0 {
					assert.Equal(t, []any{heldN}, sizes, "held_sizes beside held_n %d", heldN)
				} else {
					assert.Empty(t, sizes, "held_sizes without held_n")
				}
				return reply{rank: r[3].(int64), n: r[4].(int64), heldN: heldN, held: held}
			}
			// c, back at its rank 2, remembers a fleet of 3: ranks 0 and
			// 1 are not back yet.
			got := beat("c", "2 keep 60000 3 0 1")
			assert.Equal(t, reply{rank: 2, n: 3, heldN: 3, held: []int64{0, 1}}, got, "the member back")
			// A newcomer takes a rank above them, and leaves them held.
			got = beat("d", "")
			assert.Equal(t, reply{rank: 3, n: 4, heldN: 3, held: []int64{0, 1}}, got, "the newcomer")
			// c renews the keep; a member back asks for its own.
			beat("c", "2 keep 60000 3 0 1")
			got = beat("a", "0")
			assert.Equal(t, reply{rank: 0, n: 4, heldN: 3, held: []int64{1}}, got, "a member back at its rank")
			got = beat("d", "3")
			assert.Equal(t, reply{rank: 3, n: 4, heldN: 3, held: []int64{1}}, got, "the newcomer, after")

			// Bad keeps are refused, and change nothing.
			before := dumpKeys(t, s.Client, keys)
			for _, bad := range []string{"2 keep", "2 keep 60000", "2 keep 60000 3", "2 keep 0 3 1", "2 keep -5 3 1",
				"2 keep 60000 0 1", "2 keep 60000 3 3", "2 keep 60000 3 -1", "2 keep 60000 3 1.5", "2 kept 60000 3 1", "2 keep x 3 1"} {
				_, err := hb.Run(ctx, s.Client, keys, "c", "redis", "1700000000000 0 0", 2000, 60_000, 1100, 180_000, bad, "").Result()
				if assert.Error(t, err, bad) {
					assert.True(t, strings.HasPrefix(err.Error(), "PACER_ARG"), "%q: %v", bad, err)
				}
			}
			assert.Equal(t, before, dumpKeys(t, s.Client, keys), "a refused heartbeat changed the fleet's keys")

			// A keep not renewed expires: on a fleet of its own, x keeps
			// rank 0 for 1 ms; the next newcomer takes it.
			keys = fleetOf(t, s.Client, keys[0]+"x", format)
			assert.Equal(t, reply{rank: 1, n: 2, heldN: 2, held: []int64{0}}, beat("x", "1 keep 1 2 0"), "kept for 1 ms")
			time.Sleep(20 * time.Millisecond)
			assert.Equal(t, reply{rank: 0, n: 2}, beat("y", ""), "a newcomer after the keep expired")
			assert.False(t, s.Client.HExists(ctx, keys[1], "~r").Val(), "an expired keep is removed")
		})
	}
}

// TestHeartbeatKeepsRanksAboveTop: ranks kept above the top taken (the
// member back has the lowest) push a newcomer above them too, and become
// holes below it.
func TestHeartbeatKeepsRanksAboveTop(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	hb := redis.NewScript(lua.Heartbeat)
	for _, format := range []string{"2", "3"} {
		t.Run("format="+format, func(t *testing.T) {
			keys := fleetOf(t, s.Client, redistest.Prefix(t)+format+"{limiters}", format)
			run := func(id, want string) []any {
				r, err := hb.Run(ctx, s.Client, keys, id, "redis", "1700000000000 0 0", 2000, 60_000, 1100, 180_000, want, "").Slice()
				require.NoError(t, err)
				return r
			}
			run("a", "0 keep 60000 3 1 2")
			r := run("b", "")
			assert.Equal(t, int64(3), r[3], "the newcomer's rank")
			assert.Equal(t, "[1 2]", fmt.Sprint(r[5]), "held ranks")
			assert.Equal(t, "[1 2]", fmt.Sprint(r[9]), "holes")
		})
	}
}

// fleetOf returns heartbeat.lua's 12 keys of a fleet named k (KEYS[1]),
// told format (KEYS[7]).
func fleetOf(t *testing.T, c *redis.Client, k, format string) []string {
	t.Helper()
	keys := []string{k}
	for _, x := range fleetSuffixes {
		keys = append(keys, k+x)
	}
	require.NoError(t, c.Set(t.Context(), keys[6], format, 0).Err())
	return keys
}
