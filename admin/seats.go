package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/lua"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// A SeatStatus is a key's in-flight band (reserve.Band.InFlight) as Redis
// holds it: the seats the fleet's calls hold, the calls queued for seats,
// who holds them, and the N an operator stored.
type SeatStatus struct {
	// Used is the seats held now by the fleet's calls, Waiting the calls
	// queued for seats, fleet-wide. The seats of a holder the fleet no
	// longer lists (or not heard from for 3.5 heartbeat intervals, see
	// Options.HeartbeatInterval) are left out, as the key's next call
	// drops them.
	Used    int `json:"used"`
	Waiting int `json:"waiting"`
	// Stored is the N an operator stored (Client.SetInFlight), in force in
	// place of the N the fleet's code passes; 0 for none. The code's N is
	// not recorded in Redis.
	Stored int `json:"stored_n"`
	// Holders hold the seats, the most seats first (empty, never nil).
	Holders []SeatHolder `json:"holders"`
}

// A SeatHolder is one member of the fleet holding seats on a key.
type SeatHolder struct {
	// Holder is the member's rank in the fleet (see Client.Fleet), or
	// "i<Limiter id>" for a Limiter that had no rank yet.
	Holder string `json:"holder"`
	// Limiter is the id of the Limiter that holds the holder's place ("-"
	// if not recorded).
	Limiter string `json:"limiter"`
	Seats   int    `json:"seats"`
}

var seatsScript = redis.NewScript(lua.Seats)

// adminSeatMember is seats.lua's ARGV[2] for a read: admin is no member
// of the fleet and holds nothing.
const adminSeatMember = "admin iadmin 0 r"

// readSeats reads key's seats (seats.lua's read, which writes nothing)
// into a SeatStatus, its Stored left to the caller. The ranks the fleet
// lists are read first (they live under another hash tag), so that the
// holders the fleet no longer lists are left out as the key's next call
// would drop them.
func (a *Client) readSeats(ctx context.Context, key string) (SeatStatus, error) {
	ranks, err := a.rdb.ZRangeWithScores(ctx, layout.FleetKeys(a.prefix)[3], 0, -1).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return SeatStatus{}, err
	}
	listed := make([]string, 0, len(ranks))
	for _, z := range ranks {
		listed = append(listed, strconv.FormatInt(int64(z.Score), 10))
	}
	seats, queue, _ := layout.SeatKeys(a.prefix, key)
	beat := strconv.FormatInt(max(a.beat.Milliseconds(), 1), 10)
	res, err := seatsScript.Run(ctx, a.rdb, []string{seats, queue},
		"read", adminSeatMember, strings.Join(listed, " "), "", "1", "1", beat+" 0 0 0").Slice()
	if err != nil {
		return SeatStatus{}, err
	}
	return parseSeats(res)
}

// parseSeats reads seats.lua's read reply: {N, used, waiting, "<holder>
// <limiter id> <seats>"...}.
func parseSeats(res []any) (SeatStatus, error) {
	bad := fmt.Errorf("admin: seats: unexpected reply %v", res)
	if len(res) < 3 {
		return SeatStatus{}, bad
	}
	used, ok1 := res[1].(int64)
	waiting, ok2 := res[2].(int64)
	if !ok1 || !ok2 {
		return SeatStatus{}, bad
	}
	st := SeatStatus{Used: int(used), Waiting: int(waiting), Holders: []SeatHolder{}}
	for _, r := range res[3:] {
		s, _ := r.(string)
		f := strings.Fields(s)
		if len(f) != 3 {
			return SeatStatus{}, bad
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			return SeatStatus{}, bad
		}
		st.Holders = append(st.Holders, SeatHolder{Holder: f[0], Limiter: f[1], Seats: n})
	}
	slices.SortFunc(st.Holders, func(x, y SeatHolder) int {
		if x.Seats != y.Seats {
			return y.Seats - x.Seats
		}
		return strings.Compare(x.Holder, y.Holder)
	})
	return st, nil
}

// parseStoredN reads an operator's N as stored (layout.SeatKeys).
func parseStoredN(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > layout.MaxInFlight {
		return 0, fmt.Errorf("%w: the stored in-flight N %q", reserve.ErrStoredLimit, v)
	}
	return n, nil
}

// SetInFlight stores n as key's in-flight N: every Limiter of the fleet
// lets at most n units of calls be open at once on the key's in-flight
// band (reserve.Band.InFlight), in place of the N its code passes, from
// the key's next call for seats on. It persists until UnsetInFlight, the
// key's seats idle or not. n must be a whole number from 1 to 1,000,000
// (reserve.ErrInvalidPolicy; nothing is written). who and reason go to the
// key's history (Change.Op "in-flight", Before and After the N stored,
// "" for none), in the transaction that stores n.
//
// Lowering N takes no seat back: the calls in flight keep theirs, and no
// call gets one until fewer than the new N are in use.
func (a *Client) SetInFlight(ctx context.Context, key string, n int, who, reason string) (Change, error) {
	if err := checkKey(key); err != nil {
		return Change{}, err
	}
	if n < 1 || n > layout.MaxInFlight {
		return Change{}, fmt.Errorf("admin: in-flight %q: %w: N %d (want a whole number from 1 to %d)",
			key, reserve.ErrInvalidPolicy, n, layout.MaxInFlight)
	}
	return a.changeSeats(ctx, key, strconv.Itoa(n), who, reason)
}

// UnsetInFlight removes key's stored in-flight N: the fleet goes back to
// the N its code passes. ErrNotStored if none is stored.
func (a *Client) UnsetInFlight(ctx context.Context, key, who, reason string) (Change, error) {
	if err := checkKey(key); err != nil {
		return Change{}, err
	}
	return a.changeSeats(ctx, key, "", who, reason)
}

// opInFlight is the history's Op for a change of the stored in-flight N.
const opInFlight = "in-flight"

// changeSeats stores value as key's in-flight N ("" removes it) and
// records the change in the key's history, in one transaction: both
// happen or neither. (admin.lua records the other changes; it knows no
// in-flight N.) The stored N and the history are watched: a change made
// meanwhile makes it read again, three times at most.
func (a *Client) changeSeats(ctx context.Context, key, value, who, reason string) (Change, error) {
	_, _, nKey := layout.SeatKeys(a.prefix, key)
	hist := a.redisKey(key) + ":history"
	var entry string
	txf := func(tx *redis.Tx) error {
		pipe := tx.Pipeline()
		nType := pipe.Type(ctx, nKey)
		hType := pipe.Type(ctx, hist)
		cur := pipe.Get(ctx, nKey)
		tm := pipe.Time(ctx)
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if t := nType.Val(); t != "none" && t != "string" {
			return fmt.Errorf("%w: the stored in-flight N's key holds a %s", reserve.ErrWrongType, t)
		}
		if t := hType.Val(); t != "none" && t != "list" {
			return fmt.Errorf("%w: the history key holds a %s", reserve.ErrWrongType, t)
		}
		before := cur.Val()
		if value == "" && before == "" {
			return ErrNotStored
		}
		now, err := tm.Result()
		if err != nil {
			return err
		}
		b, err := json.Marshal(map[string]any{"at_ms": now.UnixMilli(), "op": opInFlight, "who": who,
			"reason": reason, "before": before, "after": value})
		if err != nil {
			return err
		}
		entry = string(b)
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			if value == "" {
				p.Del(ctx, nKey)
			} else {
				p.Set(ctx, nKey, value, 0)
			}
			p.LPush(ctx, hist, entry)
			p.LTrim(ctx, hist, 0, int64(a.keep-1))
			return nil
		})
		return err
	}
	var err error
	for range 3 {
		if err = a.rdb.Watch(ctx, txf, nKey, hist); !errors.Is(err, redis.TxFailedErr) {
			break
		}
	}
	switch {
	case errors.Is(err, ErrNotStored):
		return Change{}, fmt.Errorf("admin: %s %q: %w", opInFlight, key, ErrNotStored)
	case errors.Is(err, reserve.ErrWrongType):
		return Change{}, fmt.Errorf("admin: %s %q: %w", opInFlight, key, err)
	case errors.Is(err, redis.TxFailedErr):
		return Change{}, fmt.Errorf("admin: %s %q: %w (three times): nothing changed", opInFlight, key, errChanged)
	case err != nil:
		return Change{}, adminError(opInFlight, key, err)
	}
	return parseChange(entry)
}
