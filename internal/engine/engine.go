// Package engine is pacer's reservation engine in Go: the engine of the Lua
// scripts in package lua (core.lua and the operations built on it), on state
// strings of the same format, for a process's local fallback. A key paced
// locally therefore behaves as Redis would at the process's share (policies,
// window bands with their origins, stored limits, pauses, settles), and its
// state passes between the two without translation.
//
// The code follows the scripts line by line, with the same float operations
// in the same order, so that both give the same slots and write the same
// bytes; engine_test.go runs random operation sequences on both, against a
// real redis-server, and compares every reply and every state. Where the Lua
// has a comment, the Go does not repeat it: read core.lua.
//
// Times are as in the scripts: a Group is loaded at an instant now (integer
// Unix µs and the ns beyond), and everything inside is in float µs relative
// to now. With the local fallback, now is the server's clock as the process
// estimates it, so that its states and Redis's count from the same clock.
package engine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// A Band is one band of a policy, as the scripts receive it (core.lua's
// ARGV[5]).
type Band struct {
	Name   string
	Unit   int  // the index of the unit it charges; -1: none the caller charges
	Bucket bool // a token bucket; else a fixed window
	// A bucket: Rate units per second, Burst units (integer >= 1).
	Rate, Burst float64
	// A window: N units per window of LenUS µs, whose boundaries lie at
	// OriginUS modulo LenUS.
	N               float64
	LenUS, OriginUS int64
}

// A Share is the part of every band a caller takes (core.lua's ARGV[3]).
// The zero Share is the whole limit.
type Share struct {
	// N is the fleet's size; at most 1: the whole limit.
	N int
	// Held are the ranks (0..N-1) of the members a group leaves their own
	// shares to: a caller on Redis whose fleet has members pacing locally.
	Held []int
	// Member, with IsMember, is this member's rank: a process pacing
	// locally takes its own share alone (rate/N, a burst B_k, N_k units of
	// each window, and slots on a lattice shared out by rank when the burst
	// is under N; see core.lua). Only this package knows member shares:
	// Redis never runs one.
	Member   int
	IsMember bool
	// Also, with IsMember, is another fleet size (0: none) the member's
	// share keeps within too: right after the fleet changed, members may
	// pace on either size (each learns of the change at its next
	// heartbeat), so a member that knows both takes the smaller of its
	// shares in the two (its burst, its window quotas, its rate) and only
	// the instants of its rank on both lattices. Member must be under Also.
	Also int
}

// Whole reports whether s is the whole limit.
func (s Share) Whole() bool { return s.N <= 1 || (!s.IsMember && len(s.Held) == 0) }

// Arg returns s as the scripts take it (ARGV[3]): "1", "<n> <held>..." or
// a member's "m <n> <k> <also>".
func (s Share) Arg() string {
	if s.IsMember && s.N > 1 {
		return "m " + strconv.Itoa(s.N) + " " + strconv.Itoa(s.Member) + " " + strconv.Itoa(s.Also)
	}
	if s.Whole() {
		return "1"
	}
	var b strings.Builder
	b.WriteString(strconv.Itoa(s.N))
	for _, k := range s.Held {
		b.WriteByte(' ')
		b.WriteString(strconv.Itoa(k))
	}
	return b.String()
}

// Errors, matching the scripts' error codes.
var (
	// ErrArg: bad arguments (PACER_ARG).
	ErrArg = errors.New("engine: bad argument")
	// ErrExceeds: a cost above a band's burst or N (PACER_EXCEEDS).
	ErrExceeds = errors.New("engine: a cost is above its band's burst or N")
	// ErrWrongType: the state is not one (PACER_WRONGTYPE).
	ErrWrongType = errors.New("engine: the state key holds something else")
	// ErrConfig: the stored limit cannot be read (PACER_CONFIG).
	ErrConfig = errors.New("engine: the stored limit cannot be read")
)

// maxQueueUS is core.lua's max_queue_us (reserve.ErrQueueTooLong).
const maxQueueUS = 30 * 365 * 24 * 3600 * 1000000

// sameUS is core.lua's same_us.
const sameUS = 0.0005

func argError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrArg}, args...)...)
}

// ParseBands reads band records in the stored-limit text form ("<k> then k
// of <name> <unit> <kind> <a> <b>", units by name) against units, as
// core.lua's read_bands(list, i, true) does: a unit not in units charges
// nothing (-1).
func ParseBands(text string, units []string) ([]Band, error) {
	f := strings.Fields(text)
	if len(f) < 1 {
		return nil, fmt.Errorf("%w: empty", ErrConfig)
	}
	k, err := strconv.Atoi(f[0])
	if err != nil || k < 1 || len(f) < 1+5*k {
		return nil, fmt.Errorf("%w: need at least one band", ErrConfig)
	}
	out := make([]Band, 0, k)
	for i := range k {
		r := f[1+5*i : 6+5*i]
		b := Band{Name: r[0], Unit: -1}
		for u, name := range units {
			if name == r[1] {
				b.Unit = u
				break
			}
		}
		a, err := strconv.ParseFloat(r[3], 64)
		if err != nil || r[0] == "" || r[0][0] == '~' {
			return nil, fmt.Errorf("%w: bad band %s", ErrConfig, r[0])
		}
		switch r[2] {
		case "b":
			burst, err := strconv.ParseFloat(r[4], 64)
			if err != nil || a <= 0 || burst < 1 {
				return nil, fmt.Errorf("%w: bad bucket %s", ErrConfig, r[0])
			}
			b.Bucket, b.Rate, b.Burst = true, a, burst
		case "w":
			l, o, ok := strings.Cut(r[4], ":")
			length, err1 := strconv.ParseInt(l, 10, 64)
			origin, err2 := strconv.ParseInt(o, 10, 64)
			if !ok || err1 != nil || err2 != nil || a < 1 || length < 1 || origin < 0 {
				return nil, fmt.Errorf("%w: bad window %s", ErrConfig, r[0])
			}
			b.N, b.LenUS, b.OriginUS = a, length, origin
		default:
			return nil, fmt.Errorf("%w: bad band kind %s", ErrConfig, r[2])
		}
		out = append(out, b)
	}
	return out, nil
}
