package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pacer-go/pacer/internal/hook"
	"github.com/pacer-go/pacer/lua"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// ErrPolicyUnknown is returned by Client.Queue for a key whose limit in
// force is unknown: nothing stored (or stored in shadow mode only) and no
// Limiter reports its code's.
var ErrPolicyUnknown = errors.New("admin: the key's limit is unknown (nothing stored, no Limiter reports its code's)")

// A Queue is what a key's fleet has already granted ahead of now, as Redis
// holds it, and when a call reserved now would go: what a change of the
// key's limit or pause waits behind. The slots already granted keep their
// places: a new limit (SetBands, SetLimit, UnsetLimit) spaces only the
// calls reserved after them, so the provider sees it from Next on; a pause
// moves the fleet's sleepers behind it at once (reserve.Reservation.Sleep)
// and the calls go again from Next; a resume moves the calls granted
// during the pause earlier.
type Queue struct {
	Now time.Time `json:"now"` // Redis's clock at the read
	// Next is how long a call costing one unit in each band, reserved
	// now, would wait for its slot under the limit and pause in force,
	// behind the slots already granted: the wait lua/peek.lua computes,
	// the one implementation of the rule; 0 for at once.
	Next time.Duration `json:"next_ns"`
	// Binding is what sets Next: the band whose own wait is the longest,
	// reserve.PauseBinding when the pause does (no band's queue outlasts
	// it by more than a unit's spacing), "" when nothing waits.
	Binding string `json:"binding"`
	// Granted is, for a bucket band that binds, the units it has granted
	// beyond what it holds now (its balance below zero, peek.lua's
	// figure), in the unit it charges (Unit): the queue the fleet has
	// already granted at its rate. 0 otherwise. It counts at the rate in
	// force at the read: read it before a change of rate for the queue
	// granted under the previous one (after it, the same schedule reads
	// in the new rate's units).
	Granted float64 `json:"granted"`
	Unit    string  `json:"unit,omitempty"`
	// Paused is the time left in a pause (0 if none).
	Paused time.Duration `json:"paused_ns"`
}

// At is when a call reserved at the read would go: Now + Next.
func (q Queue) At() time.Time { return q.Now.Add(q.Next) }

var peekScript = redis.NewScript(lua.Peek)

// Queue reads key's queue (see Queue) without changing anything, under the
// limit in force: the code's policy as a Limiter reports it with the
// stored limit over it (merged by the script as the fleet's calls are),
// or the stored limit alone when no Limiter reports one.
// ErrPolicyUnknown when neither is known, ErrUnknownKey as for Status.
func (a *Client) Queue(ctx context.Context, key string) (Queue, error) {
	if err := checkKey(key); err != nil {
		return Queue{}, err
	}
	b, err := a.readBands(ctx, key)
	if err != nil {
		return Queue{}, err
	}
	pol := b.code
	if len(pol) == 0 && !b.shadow {
		pol = b.stored
	}
	if len(pol) == 0 {
		if b.raw == "" && len(b.state) == 0 {
			return Queue{}, fmt.Errorf("admin: queue %q: %w", key, ErrUnknownKey)
		}
		return Queue{}, fmt.Errorf("admin: queue %q: %w", key, ErrPolicyUnknown)
	}
	policy, units, err := scriptPolicy(pol)
	if err != nil {
		return Queue{}, err
	}
	// A calendar window's table, around the client's clock, as the fleet's
	// calls send it (the script finds Redis's now in it).
	cal, err := hook.CalendarArg(pol, time.Now())
	if err != nil {
		return Queue{}, fmt.Errorf("admin: queue %q: %w", key, err)
	}
	args := []any{"", cal + "1", policy}
	for range units {
		args = append(args, "1")
	}
	k := a.redisKey(key)
	res, err := peekScript.Run(ctx, a.rdb, []string{k, k + ":limit"}, args...).Result()
	if err != nil {
		return Queue{}, adminError("queue", key, err)
	}
	reply, ok := res.([]any)
	if !ok || len(reply) < 4 || (len(reply)-4)%4 != 0 {
		return Queue{}, fmt.Errorf("admin: queue %q: %w: unexpected reply %v", key, reserve.ErrWrongType, res)
	}
	nowUS, ok1 := reply[0].(int64)
	nowNS, ok2 := reply[1].(int64)
	wait, ok3 := reply[2].(int64)
	paused, ok4 := reply[3].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return Queue{}, fmt.Errorf("admin: queue %q: unexpected reply %v", key, res)
	}
	q := Queue{Now: time.UnixMicro(nowUS).Add(time.Duration(nowNS)).UTC(), Next: time.Duration(max(wait, 0)), Paused: time.Duration(max(paused, 0))}
	if wait <= 0 {
		return q, nil
	}
	longest, value := int64(-1), 0.0
	for i := 4; i+3 < len(reply); i += 4 {
		name, _ := reply[i].(string)
		v, _ := reply[i+1].(string)
		bw, _ := reply[i+2].(int64)
		if bw > longest {
			longest, q.Binding = bw, name
			value, _ = strconv.ParseFloat(v, 64)
		}
	}
	inForce := pol
	if !b.shadow && len(b.code) > 0 {
		inForce = mergePolicy(b.code, b.stored) // as the script merges them
	}
	var band reserve.Band
	if i := slices.IndexFunc(inForce, func(x reserve.Band) bool { return x.Name == q.Binding }); i >= 0 {
		band = inForce[i]
	}
	spacing := time.Duration(0)
	if band.Limit != (reserve.Limit{}) {
		spacing = time.Duration(float64(time.Second) / band.Limit.Rate)
	}
	if q.Paused > 0 && time.Duration(longest) <= q.Paused+spacing {
		q.Binding = reserve.PauseBinding
		return q, nil
	}
	if band.Limit != (reserve.Limit{}) && value < 0 {
		q.Granted, q.Unit = -value, band.Name
		if band.Unit != "" {
			q.Unit = band.Unit
		}
	}
	return q, nil
}

// scriptPolicy returns pol as the scripts' policy argument (core.lua's
// ARGV[3], in its text form) and the number of its cost units. The stored
// text ("k name unit kind a x" ...) gives each band's unit by name; the
// scripts' argument by its index in the units' list.
func scriptPolicy(pol reserve.Policy) (string, int, error) {
	text, err := pol.MarshalText()
	if err != nil {
		return "", 0, err
	}
	f := strings.Fields(string(text))
	var unitNames []string
	var bands []string
	for i := 1; i+4 < len(f); i += 5 {
		u := slices.Index(unitNames, f[i+1])
		if u < 0 {
			unitNames = append(unitNames, f[i+1])
			u = len(unitNames) - 1
		}
		bands = append(bands, f[i], strconv.Itoa(u+1), f[i+2], f[i+3], f[i+4])
	}
	return strconv.Itoa(len(unitNames)) + " " + strings.Join(unitNames, " ") + " " + f[0] + " " + strings.Join(bands, " "), len(unitNames), nil
}
