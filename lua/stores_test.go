package lua_test

// Where the rule tests run the scripts: a key on an internal/luastore
// Store of its own (a member pacing locally: the local fallback runs the
// scripts in process), or on a real redis-server (a group on Redis). Both
// take the same calls, redis.Script.Run on a client clock (ARGV[2]'s
// "t<now_us>:<now_ns> ").

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/luastore"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// start is the client clock the rule tests start from, Unix ns.
const start = int64(1795400000_000_000_000)

var (
	reserveScript = redis.NewScript(lua.Reserve)
	adjustScript  = redis.NewScript(lua.Adjust)
	pauseScript   = redis.NewScript(lua.Pause)
	resumeScript  = redis.NewScript(lua.Resume)
	adminScript   = redis.NewScript(lua.Admin)
)

// A store is one key's group of Redis keys on a luastore.Store or a
// redis-server.
type store struct {
	t   testing.TB
	sc  redis.Scripter
	get func(key string) (string, bool)
	key string        // KEYS[1], the state; the others add a suffix
	rdb *redis.Client // on a redis-server: its client (nil on a luastore)
	now int64         // the client clock of the call in progress, Unix ns: a luastore's clock
}

// local returns a key on a luastore.Store of its own, whose clock is the
// client's: a key expires at the client clock's time, as the local
// fallback's would.
func local(t testing.TB) *store {
	s := &store{t: t, key: "{k}"}
	ls := luastore.New(func() time.Time { return time.Unix(0, s.now) })
	s.sc = ls
	s.get = ls.Get
	return s
}

// onRedis returns a key of its own on srv (a fresh prefix). Redis expires
// keys on its own clock, the test's client clock runs far faster: no key
// expires within a test (a missing state reads as the one that expired).
func onRedis(t testing.TB, srv *redistest.Server) *store {
	s := &store{t: t, sc: srv.Client, rdb: srv.Client, key: redistest.Prefix(t) + "{k}"}
	s.get = func(key string) (string, bool) {
		v, err := srv.Client.Get(context.Background(), key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("GET %s: %v", key, err)
		}
		return v, err == nil
	}
	keys := []string{s.key, s.key + ":limit", s.key + ":shadow", s.key + ":done", s.key + ":history", s.key + ":weights"}
	t.Cleanup(func() { srv.Client.Del(context.Background(), keys...) })
	return s
}

// run runs sc at now with keys (KEYS[1] plus suffixes) and args, and
// returns its reply.
func (s *store) run(sc *redis.Script, now int64, suffixes []string, args []any) any {
	s.t.Helper()
	s.now = now
	keys := make([]string, len(suffixes))
	for i, x := range suffixes {
		keys[i] = s.key + x
	}
	v, err := sc.Run(context.Background(), s.sc, keys, args...).Result()
	if err != nil {
		s.t.Fatalf("%v %q: %v", keys, args, err)
	}
	return v
}

// list runs sc as run does, for a script whose reply is an array.
func (s *store) list(sc *redis.Script, now int64, suffixes []string, args []any) []any {
	s.t.Helper()
	a, ok := s.run(sc, now, suffixes, args).([]any)
	if !ok {
		s.t.Fatalf("%v: reply not an array", args)
	}
	return a
}

// A grant is one request's part of Reserve's reply: its slot (Unix ns)
// and its number (> 0 granted; 0, -1, -2 refused).
type grant struct{ slot, seq int64 }

// reserve reserves m requests of cost 1 on every unit of p, with no
// maximum wait, at now with share (Reserve, no floor): one request as the
// common call sends it (no floor, no requests argument), more as
// little-endian doubles.
func (s *store) reserve(now int64, share string, p policy, m int) []grant {
	s.t.Helper()
	var more []any
	if m > 1 {
		var reqs []float64
		for range m {
			reqs = append(append(reqs, -1), p.ones()...)
		}
		more = []any{"", doubles(reqs...)}
	}
	v := s.run(reserveScript, now, []string{"", ":limit", ":shadow"}, p.args(now, share, more...))
	r, ok := decodeReserve(s.t, v).(reserveReply)
	if !ok || len(r.grants) != 2*m {
		s.t.Fatalf("Reserve: reply %s: want %d requests", show(v), m)
	}
	at := r.nowUS*1000 + r.nowNS
	out := make([]grant, m)
	for i := range out {
		out[i] = grant{slot: at + r.grants[2*i], seq: r.grants[2*i+1]}
	}
	return out
}

// reserve1 is reserve of one request, which must be granted.
func (s *store) reserve1(now int64, share string, p policy) int64 {
	s.t.Helper()
	g := s.reserve(now, share, p, 1)
	if g[0].seq <= 0 {
		s.t.Fatalf("Reserve at %d, share %q: refused: %+v", now, share, g[0])
	}
	return g[0].slot
}

// cancel cancels g (Adjust), reserved at cost 1 on every unit of p. (The
// reply, applied or not, is not looked at.)
func (s *store) cancel(now int64, share string, p policy, g grant) {
	s.t.Helper()
	more := append([]any{"cancel", strconv.FormatInt(g.slot/1000, 10), strconv.FormatInt(g.slot%1000, 10), strconv.FormatInt(g.seq, 10)}, p.onesText()...)
	s.now = now
	keys := []string{s.key, s.key + ":limit", s.key + ":done"}
	if err := adjustScript.Run(context.Background(), s.sc, keys, p.args(now, share, more...)...).Err(); err != nil {
		s.t.Fatalf("Adjust %q: %v", more, err)
	}
}

// pause pauses the key for dUS µs from now (Pause).
func (s *store) pause(now int64, share string, p policy, dUS int64) {
	s.t.Helper()
	s.list(pauseScript, now, []string{"", ":limit"}, p.args(now, share, strconv.FormatInt(dUS, 10)))
}

// resume ends the key's pause at now (Resume): it returns how far (ns)
// the reservations granted during it moved earlier.
func (s *store) resume(now int64, share string, p policy) (moved int64) {
	s.t.Helper()
	return s.list(resumeScript, now, []string{"", ":limit"}, p.args(now, share))[3].(int64)
}

// setStored stores a limit for the key (Admin's set, as cmd/pacer set).
func (s *store) setStored(now int64, text string) {
	s.t.Helper()
	s.now = now
	keys := []string{s.key, s.key + ":limit", s.key + ":shadow", s.key + ":history", s.key + ":weights"}
	if err := adminScript.Run(context.Background(), s.sc, keys, "set", text, "test", "", "5").Err(); err != nil {
		s.t.Fatalf("Admin set %q: %v", text, err)
	}
}

// state returns the key's state ("" if none) at now.
func (s *store) state(now int64) string {
	s.now = now
	v, _ := s.get(s.key)
	return v
}

// dropRecord takes the reserved record name ("~w") out of the key's state
// as a script of an earlier release would on its next write (it drops the
// records it does not know), keeping the rest and the key's expiry.
func (s *store) dropRecord(now int64, name string) {
	s.t.Helper()
	v := s.state(now)
	i := strings.Index(v, " "+name+" ")
	if i < 0 {
		s.t.Fatalf("no %s record in %q", name, v)
	}
	j := i + len(name) + 2
	for k := 0; k < 2; k++ { // its two fields
		for j < len(v) && v[j] != ' ' {
			j++
		}
		if k == 0 {
			j++
		}
	}
	if s.rdb == nil {
		s.t.Fatalf("dropRecord: the key is not on a redis-server")
	}
	if err := s.rdb.SetArgs(context.Background(), s.key, v[:i]+v[j:], redis.SetArgs{KeepTTL: true}).Err(); err != nil {
		s.t.Fatalf("SET %s: %v", s.key, err)
	}
}
