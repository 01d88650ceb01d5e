package lua_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// TestHeartbeatRefusedWhenFull: a Redis at its maxmemory with noeviction
// refuses a script's first write that may add memory (OOM), but lets a
// script that has written already go on (it cannot stop it midway). A
// heartbeat must be refused as a whole there, as every other script is:
// its members treat OOM as an outage (reserve/call.go, the Python client),
// pace locally, and must not hear from a heartbeat that went through that
// Redis answers, while their reservations fail (combination runner, seed
// 1, with the heartbeat's indexes: the prune of KEYS[10], a write that
// adds nothing, came before the member's ZADD, so every heartbeat passing
// 12 keys went through a full Redis; members joined the fleet and came back
// to Redis during the fault, then flapped between Redis and local pacing
// every few ms, and a sliding window took 8 permits in 67 ms, allowed 3).
// Whatever the fleet's format and the keys passed, the heartbeat fails
// with OOM and changes none of the fleet's keys.
func TestHeartbeatRefusedWhenFull(t *testing.T) {
	s := redistest.NewProcess(t) // its maxmemory is changed
	ctx := context.Background()
	hb := redis.NewScript(lua.Heartbeat)
	for _, format := range []string{"", "2", "3"} {
		for _, nkeys := range []int{8, 9, 12} {
			t.Run(fmt.Sprintf("format=%q/keys=%d", format, nkeys), func(t *testing.T) {
				k := redistest.Prefix(t) + format + ":" + fmt.Sprint(nkeys) + "{limiters}"
				keys := []string{k}
				for _, x := range fleetSuffixes {
					keys = append(keys, k+x)
				}
				if format != "" {
					s.Client.Set(ctx, keys[6], format, 0)
				}
				keys = keys[:nkeys]
				beat := func(id, mode, since string) ([]any, error) {
					return hb.Run(ctx, s.Client, keys, id, mode, since+" 0 0", 60_000, 120_000, 60_000, 180_000, "", "").Slice()
				}
				for _, id := range []string{"a", "b", "c", "a"} {
					if _, err := beat(id, "redis", "1700000000000"); err != nil {
						t.Fatal(err)
					}
				}
				before := dumpKeys(t, s.Client, keys)
				full(t, s.Client)
				for _, c := range []struct{ id, mode, since string }{
					{"a", "redis", "1700000000000"},
					{"b", "local", "1700000001000"},
					{"d", "redis", "1700000000000"}, // new to the fleet
				} {
					r, err := beat(c.id, c.mode, c.since)
					if err == nil || !strings.Contains(err.Error(), "OOM") {
						t.Errorf("%s's heartbeat (%s) on a full Redis: %v, %v; want OOM", c.id, c.mode, r, err)
					}
				}
				after := dumpKeys(t, s.Client, keys)
				for i, k := range keys {
					if after[i] != before[i] {
						t.Errorf("a heartbeat refused with OOM changed KEYS[%d] (%s)", i+1, k)
					}
				}
				room(t, s.Client)
			})
		}
	}
}

// full makes c's server refuse every write that may add memory
// (maxmemory 1 under noeviction), until room (also on t.Cleanup).
func full(t *testing.T, c *redis.Client) {
	t.Helper()
	ctx := context.Background()
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { room(t, c) })
	if err := c.Set(ctx, "probe", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("the server is not full: %v", err)
	}
}

// room gives c's server room again.
func room(t *testing.T, c *redis.Client) {
	t.Helper()
	if err := c.ConfigSet(context.Background(), "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
}

// dumpKeys is the content of each of keys (DUMP; "" if absent), their
// expiry aside.
func dumpKeys(t *testing.T, c *redis.Client, keys []string) []string {
	t.Helper()
	out := make([]string, len(keys))
	for i, k := range keys {
		v, err := c.Dump(context.Background(), k).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		out[i] = v
	}
	return out
}
