// Package layout is the Redis protocol pacer speaks, shared by package
// reserve (the Limiter) and package admin (the operator's view): where a
// key's records live, how its state string reads, and the scripts' error
// codes. The scripts themselves are in package lua, and lua/core.lua's
// header documents the state format.
package layout

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxFill is the longest time an empty bucket may take to fill, and the
// longest pause: it keeps every duration the scripts compute far inside a
// double's exact range.
const MaxFill = 10 * 365 * 24 * time.Hour

// MaxTenant bounds a fair request's tenant, in bytes: it is a field name and
// a zset member in Redis (lua/fair.lua, the stored weights). reserve, admin
// and cmd/pacer refuse a longer one.
const MaxTenant = 256

// Key is the Redis key of key's state under prefix: prefix + "{" + key +
// "}", braces and '%' in key escaped (%7B, %7D, %25), so that every Redis
// key of key shares one Cluster hash tag and no two keys share a Redis key.
// A key's other records are this plus a suffix (":limit", ":shadow",
// ":history", ":rate", ":h:<holder>", and SeatKeys').
func Key(prefix, key string) string { return prefix + "{" + Escape(key) + "}" }

var (
	escaper   = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")
	unescaper = strings.NewReplacer("%7B", "{", "%7D", "}", "%25", "%")
)

// SeatKeys are the Redis keys of key's in-flight band under prefix
// (lua/seats.lua): its seats (a hash, expiring when idle), its queue (a
// sorted set), and the N an operator stored for it (a string, "1" to
// "1000000", without expiry: it outlives the seats of a key gone idle).
func SeatKeys(prefix, key string) (seats, queue, storedN string) {
	k := Key(prefix, key)
	return k + ":seats", k + ":seatq", k + ":seatn"
}

// SeatTickets is the Redis key of key's in-flight band's tickets (the
// seats each call holds, the calls waiting): seats.lua's KEYS[4].
func SeatTickets(prefix, key string) string { return Key(prefix, key) + ":seatt" }

// MaxInFlight bounds an in-flight band's N (reserve's Band.InFlight, and
// the N an operator stores).
const MaxInFlight = 1_000_000

// KeyName returns the key whose Redis key under prefix is rk (Key's
// inverse); ok is false when rk is not one.
func KeyName(prefix, rk string) (key string, ok bool) {
	inner, ok := strings.CutPrefix(rk, prefix+"{")
	if !ok || !strings.HasSuffix(inner, "}") {
		return "", false
	}
	return Unescape(inner[:len(inner)-1]), true
}

// EventsChannel is the channel the scripts announce a key's pause,
// resume and stored limit on, for the fleet's Limiters under prefix
// (core.lua's publish): "<op> <the key's Redis key>".
func EventsChannel(prefix string) string { return prefix + "{limiters}:events" }

// Escape escapes a key as Key does.
func Escape(key string) string {
	if !strings.ContainsAny(key, "%{}") {
		return key
	}
	return escaper.Replace(key)
}

// Unescape undoes Escape.
func Unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	return unescaper.Replace(s)
}

// FleetKeys are the fleet's records under prefix, in one hash tag: the
// heartbeat set, the members' details, the policies the fleet's code
// reports for its keys, the ids in order, the suspects checked, the
// reports' times, the state format the fleet writes (FormatKey), the
// format each member writes (WritersKey), the highest it reads
// (ReadersKey), and the indexes the members told format 3 keep
// (lua/heartbeat.lua's KEYS[10..12]: the writers, those pacing locally, the
// holes in the ranks).
func FleetKeys(prefix string) []string {
	k := prefix + "{" + FleetName + "}"
	return []string{k, k + ":info", k + ":policies", k + ":ids", k + ":checked", k + ":policies:at", FormatKey(prefix), WritersKey(prefix), ReadersKey(prefix),
		k + ":x:w", k + ":x:local", k + ":x:holes"}
}

// FleetName is the hash tag of the fleet's records: Key(prefix,
// FleetName) is the heartbeat set, so no key may be named so.
const FleetName = "limiters"

// FormatKey is the state format the fleet writes, as the operator set it
// (cmd/pacer format): "1", "3", or "2" when absent (lua/heartbeat.lua's
// KEYS[7]).
func FormatKey(prefix string) string { return prefix + "{limiters}:format" }

// WritersKey is the hash of the format each member writes, by Limiter id
// (lua/heartbeat.lua's KEYS[8]).
func WritersKey(prefix string) string { return prefix + "{limiters}:writes" }

// ReadersKey is the hash of the highest state format each member reads, by
// Limiter id: "3" for a member of this release, no field for an earlier
// one (lua/heartbeat.lua's KEYS[9]).
func ReadersKey(prefix string) string { return prefix + "{limiters}:reads" }

// Policies is the hash of the policies the fleet's code reports, by key
// (FleetKeys' third).
func Policies(prefix string) string { return prefix + "{limiters}:policies" }

// ErrorCode returns the first word of a Redis error reply (a script's
// PACER_* code, or Redis's own: LOADING, OOM, ...); ok is false for other
// errors (connections refused or reset, timeouts, a closed pool).
func ErrorCode(err error) (code string, ok bool) {
	if err == nil {
		return "", false
	}
	var reply redis.Error
	if !errors.As(err, &reply) || isNetError(err) {
		return "", false
	}
	msg := reply.Error()
	if i := strings.IndexByte(msg, ' '); i > 0 {
		msg = msg[:i]
	}
	return msg, true
}

func isNetError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrClosed)
}
