package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/hook"
	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/lua"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// A Client reads and changes what a fleet's Limiters share in Redis, for
// an operator (cmd/pacer): each key's state, its stored limit, its pause,
// its history, and the fleet's Limiters. It is not a Limiter: it reserves
// nothing and does not count as one of the fleet. It is safe for concurrent
// use.
//
// A stored limit replaces, for every Limiter of the fleet on their next
// reservation, the limit their code passes for the key (which stays the
// default when nothing is stored). In shadow mode it is not enforced:
// each reservation is also reserved on the stored limit's own schedule,
// and the figures say what it would have done.
type Client struct {
	rdb    redis.UniversalClient
	prefix string
	keep   int
	beat   time.Duration // the fleet's heartbeat interval
}

// Options configure an Admin.
type Options struct {
	// KeyPrefix is the fleet's Options.KeyPrefix. Default "pacer:".
	KeyPrefix string
	// History is how many changes each key's history keeps. Default 50.
	History int
	// HeartbeatInterval is the fleet's Options.HeartbeatInterval. Default
	// 1 s (reserve's). An in-flight band's holder not heard from for 3.5
	// intervals is left out of KeyStatus.Seats: shorter than the fleet's,
	// it leaves out live holders.
	HeartbeatInterval time.Duration
}

// ErrNotStored is returned by Client.UnsetLimit for a key with no stored
// limit, and by Client.UnsetWeight for a tenant with no stored weight.
var ErrNotStored = errors.New("admin: nothing stored to remove")

// errChanged: the stored limit was not the one a change was computed from
// (admin.lua's PACER_CHANGED).
var errChanged = errors.New("admin: the stored limit changed meanwhile")

// ErrUnknownKey is returned for a key Redis knows nothing of: no state, no
// stored limit, no policy reported by a Limiter, no seats taken lately and
// no stored in-flight N.
var ErrUnknownKey = errors.New("admin: unknown key")

// New returns a Client on rdb (used as given).
func New(rdb redis.UniversalClient, opts Options) (*Client, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil client", reserve.ErrInvalidOptions)
	}
	opts.KeyPrefix = cmp.Or(opts.KeyPrefix, reserve.DefaultKeyPrefix)
	if strings.ContainsAny(opts.KeyPrefix, "{}") {
		return nil, fmt.Errorf("%w: KeyPrefix %q has a brace", reserve.ErrInvalidOptions, opts.KeyPrefix)
	}
	if opts.History == 0 {
		opts.History = 50
	}
	if opts.History < 1 {
		return nil, fmt.Errorf("%w: History %d (want at least 1)", reserve.ErrInvalidOptions, opts.History)
	}
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = time.Second
	}
	if opts.HeartbeatInterval < time.Millisecond {
		return nil, fmt.Errorf("%w: HeartbeatInterval %v (want at least 1ms)", reserve.ErrInvalidOptions, opts.HeartbeatInterval)
	}
	return &Client{rdb: rdb, prefix: opts.KeyPrefix, keep: opts.History, beat: opts.HeartbeatInterval}, nil
}

func (a *Client) redisKey(key string) string { return layout.Key(a.prefix, key) }

func (a *Client) policiesKey() string { return layout.Policies(a.prefix) }

// A Change is one entry of a key's history.
type Change struct {
	At     time.Time `json:"at"`
	Op     string    `json:"op"`               // "set", "unset", "pause 30s", "resume", "restore" (a Limiter put back a limit Redis lost), "weight", "in-flight"
	Tenant string    `json:"tenant,omitempty"` // a weight's tenant
	Who    string    `json:"who"`
	Reason string    `json:"reason"`
	// Before and After are the stored limit before and after the change,
	// as Policy.String gives it with "(shadow)" after a limit in shadow
	// mode, or for a weight the tenant's stored weight, or for "in-flight"
	// the stored in-flight N (SetInFlight); "" for none.
	Before string `json:"before"`
	After  string `json:"after"`
}

// SetLimit stores pol as key's whole stored limit, enforced by every
// Limiter of the fleet from its next reservation on, or with shadow true
// only counted (see Client). who and reason go to the key's history. Its
// bands charge the units the callers' costs give ("permits" for a
// reserve.Limit): a policy sharing no unit with the one the fleet's code
// reports for key is refused (reserve.ErrInvalidPolicy), since it would
// limit nothing. SetBands changes some bands of the stored limit and
// keeps the others, and checks each band's name and unit.
func (a *Client) SetLimit(ctx context.Context, key string, pol reserve.Policy, shadow bool, who, reason string) (Change, error) {
	if err := checkKey(key); err != nil {
		return Change{}, err
	}
	if err := pol.Validate(); err != nil {
		return Change{}, err
	}
	text, err := pol.MarshalText()
	if err != nil {
		return Change{}, err
	}
	// Every Limiter reads the limit back: store only what reads back.
	var back reserve.Policy
	if err := back.UnmarshalText(text); err != nil {
		return Change{}, err
	}
	// A stored limit charges the units the callers' costs give: one that
	// shares none with the policy the fleet's code reports would limit
	// nothing (a "permits" limit on a key paced by requests and tokens).
	if rep, err := a.rdb.HGet(ctx, a.policiesKey(), key).Result(); err == nil {
		_, reported, _ := strings.Cut(rep, " ")
		var code reserve.Policy
		if err := code.UnmarshalText([]byte(reported)); err == nil && len(code) > 0 {
			ours, theirs := units(pol), units(code)
			if !slices.ContainsFunc(ours, func(u string) bool { return slices.Contains(theirs, u) }) {
				return Change{}, fmt.Errorf("%w: the fleet's code charges %s on %q, a limit on %s would limit nothing",
					reserve.ErrInvalidPolicy, strings.Join(theirs, ", "), key, strings.Join(ours, ", "))
			}
		}
	}
	mode := "enforce"
	if shadow {
		mode = "shadow"
	}
	return a.admin(ctx, key, "set", mode+" "+string(text), who, reason)
}

// UnsetLimit removes key's stored limit: the fleet's Limiters go back to
// the limits their code passes. ErrNotStored if none is stored.
//
// When Redis holds nothing of the key at all (no state, no history), it
// may have lost the key (restarted empty) while Limiters pacing locally
// still remember its stored limit, which the first of them back would put
// back. The unset is then recorded in the key's history all the same:
// UnsetLimit returns that entry (Before and After "") with ErrNotStored,
// and no Limiter puts the limit back.
func (a *Client) UnsetLimit(ctx context.Context, key, who, reason string) (Change, error) {
	if err := checkKey(key); err != nil {
		return Change{}, err
	}
	ch, err := a.admin(ctx, key, "unset", "", who, reason)
	if err == nil && ch.Before == "" {
		return ch, fmt.Errorf("admin: unset %q: %w (Redis held nothing of the key: the unset is recorded in its history, so that no Limiter puts back a stored limit Redis lost)", key, ErrNotStored)
	}
	return ch, err
}

// SetWeight stores weight as tenant's weight on key, in every lane: the
// fair requests of the tenant (reserve.Request.Tenant) are weighed by it
// instead of the Weight their code gives, from each Limiter's next call
// on. weight must lie in [1e-6, 1e6] (reserve.ErrInvalidFairness). who
// and reason go to the key's history. While Redis is unavailable, the
// Limiters' local fallback weighs by the code's Weight.
func (a *Client) SetWeight(ctx context.Context, key, tenant string, weight float64, who, reason string) (Change, error) {
	if err := checkKey(key); err != nil {
		return Change{}, err
	}
	if !(weight >= 1e-6 && weight <= 1e6) {
		return Change{}, fmt.Errorf("%w: weight %v (in [1e-6, 1e6])", reserve.ErrInvalidFairness, weight)
	}
	if err := checkTenant(tenant); err != nil {
		return Change{}, err
	}
	return a.run(ctx, key, "weight", strconv.FormatFloat(weight, 'g', -1, 64), who, reason, tenant)
}

// UnsetWeight removes tenant's stored weight on key: its requests are
// weighed by their code's Weight again. ErrNotStored if none is stored.
func (a *Client) UnsetWeight(ctx context.Context, key, tenant, who, reason string) (Change, error) {
	if err := checkKey(key); err != nil {
		return Change{}, err
	}
	if err := checkTenant(tenant); err != nil {
		return Change{}, err
	}
	return a.run(ctx, key, "weight", "", who, reason, tenant)
}

// checkTenant refuses a tenant no Limiter would accept (over
// layout.MaxTenant bytes).
func checkTenant(tenant string) error {
	if len(tenant) > layout.MaxTenant {
		return fmt.Errorf("%w: tenant of %d bytes (at most %d)", reserve.ErrInvalidFairness, len(tenant), layout.MaxTenant)
	}
	return nil
}

func (a *Client) admin(ctx context.Context, key, op, value, who, reason string) (Change, error) {
	return a.run(ctx, key, op, value, who, reason, "")
}

// run runs admin.lua; expect, if given, is its ARGV[7] (set: the stored
// limit the key must hold).
func (a *Client) run(ctx context.Context, key, op, value, who, reason, tenant string, expect ...string) (Change, error) {
	k := a.redisKey(key)
	args := []any{op, value, who, reason, a.keep, tenant}
	for _, e := range expect {
		args = append(args, e)
	}
	res, err := adminScript.Run(ctx, a.rdb, []string{k, k + ":limit", k + ":shadow", k + ":history", k + ":weights"}, args...).Text()
	if err != nil {
		return Change{}, adminError(op, key, err)
	}
	return parseChange(res)
}

func adminError(op, key string, err error) error {
	code, ok := layout.ErrorCode(err)
	switch {
	case !ok:
		return fmt.Errorf("admin: %s %q: %w: %w", op, key, reserve.ErrUnavailable, err)
	case code == "PACER_NOTSTORED":
		return fmt.Errorf("admin: %s %q: %w", op, key, ErrNotStored)
	case code == "PACER_UNKNOWN":
		return fmt.Errorf("admin: %s %q: %w", op, key, ErrUnknownKey)
	case code == "PACER_NOTPAUSED":
		return fmt.Errorf("admin: %s %q: %w", op, key, ErrNotPaused)
	case code == "PACER_CHANGED":
		return fmt.Errorf("admin: %s %q: %w", op, key, errChanged)
	case scriptCodes[code] != nil:
		return fmt.Errorf("admin: %s %q: %w: %w", op, key, scriptCodes[code], err)
	}
	return fmt.Errorf("admin: %s %q: %w", op, key, err)
}

func parseChange(text string) (Change, error) {
	var e struct {
		AtMS   int64  `json:"at_ms"`
		Op     string `json:"op"`
		Tenant string `json:"tenant"`
		Who    string `json:"who"`
		Reason string `json:"reason"`
		Before string `json:"before"`
		After  string `json:"after"`
	}
	if err := json.Unmarshal([]byte(text), &e); err != nil {
		return Change{}, fmt.Errorf("admin: a history entry %q: %w", text, err)
	}
	c := Change{At: time.UnixMilli(e.AtMS).UTC(), Op: e.Op, Tenant: e.Tenant, Who: e.Who, Reason: e.Reason,
		Before: e.Before, After: e.After}
	if c.Op != "weight" && c.Op != opInFlight {
		c.Before, c.After = storedForPeople(e.Before), storedForPeople(e.After)
	}
	return c, nil
}

// storedForPeople turns a stored limit ("<mode> <text>") into Policy.String
// form, "(shadow)" after one in shadow mode.
func storedForPeople(v string) string {
	if v == "" {
		return ""
	}
	pol, shadow, err := parseStored(v)
	if err != nil {
		return v
	}
	if shadow {
		return pol.String() + " (shadow)"
	}
	return pol.String()
}

func parseStored(v string) (reserve.Policy, bool, error) {
	mode, text, _ := strings.Cut(v, " ")
	if mode != "enforce" && mode != "shadow" {
		return nil, false, fmt.Errorf("%w: %q: unknown mode", reserve.ErrStoredLimit, v)
	}
	var pol reserve.Policy
	if err := pol.UnmarshalText([]byte(text)); err != nil {
		return nil, false, fmt.Errorf("%w: %w", reserve.ErrStoredLimit, err)
	}
	if len(pol) == 0 {
		return nil, false, fmt.Errorf("%w: %q: no bands", reserve.ErrStoredLimit, v)
	}
	return pol, mode == "shadow", nil
}

// History returns key's changes, newest first.
func (a *Client) History(ctx context.Context, key string) ([]Change, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	list, err := a.rdb.LRange(ctx, a.redisKey(key)+":history", 0, -1).Result()
	if err != nil {
		return nil, adminError("history", key, err)
	}
	out := make([]Change, 0, len(list))
	for _, e := range list {
		c, err := parseChange(e)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// Pause grants no slot on key before now + d, fleet-wide, as a 429 with
// Retry-After d would (Limiter.Pause), and records it in the history, in
// one script call: both happen or neither. A pause belongs to the key:
// whatever policies its callers pass, every band stops and every bucket is
// empty when the pause ends. ErrUnknownKey when Redis knows nothing of the
// key (no state, no stored limit, no policy reported: a typo, most
// likely); nothing is written then.
func (a *Client) Pause(ctx context.Context, key string, d time.Duration, who, reason string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if d <= 0 || d > layout.MaxFill {
		return fmt.Errorf("%w: pause %v (want 0 < d <= %v)", reserve.ErrInvalidDuration, d, layout.MaxFill)
	}
	dUS := strconv.FormatInt((d + time.Microsecond - 1).Microseconds(), 10)
	return a.runCore(ctx, "pause", key, pauseScript, who, reason, dUS, "pause "+d.String())
}

// runCore runs a script built on core.lua and note.lua (pause.lua,
// resume.lua) as the server's clock and the whole share, with extra as the
// operation's arguments; the script records the change in the key's
// history itself. The fleet's reported policies live under another hash
// tag than the key, so the policy a Limiter reports for key is read
// before: the script runs under it (a stored limit over it, merged by the
// script), so that it knows the bands' windows (a resume moves a window's
// queue by whole windows); on the key's records alone (no policy: k = 0)
// when none is reported or it does not read. The script refuses a key
// with no state and no stored limit when no Limiter reports it
// (ErrUnknownKey).
func (a *Client) runCore(ctx context.Context, op, key string, script *redis.Script, who, reason string, extra ...string) error {
	check, policy := "0", ""
	var code reserve.Policy
	report, err := a.rdb.HGet(ctx, a.policiesKey(), key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		check = "1"
	case err != nil:
		return adminError(op, key, err)
	default:
		// "<ms> <policy>", as Status reads it.
		_, text, _ := strings.Cut(report, " ")
		var pol reserve.Policy
		if pol.UnmarshalText([]byte(text)) == nil && len(pol) > 0 {
			if p, _, err := scriptPolicy(pol); err == nil {
				policy, code = p, pol
			}
		}
	}
	// The calendar tables of the code's policy and of a stored limit's
	// bands, which the script merges in (as the fleet's calls send them).
	withStored := code
	if raw, err := a.rdb.Get(ctx, a.redisKey(key)+":limit").Result(); err == nil {
		if stored, _, err := parseStored(raw); err == nil {
			withStored = mergePolicy(code, stored)
		}
	} else if !errors.Is(err, redis.Nil) {
		return adminError(op, key, err)
	}
	cal := ""
	if len(withStored) > 0 {
		if cal, err = hook.CalendarArg(withStored, time.Now()); err != nil {
			return fmt.Errorf("admin: %s %q: %w", op, key, err)
		}
	}
	// The state is written in the format the fleet writes (SetFormat): a
	// process of the previous release may read it.
	env, err := a.envArg(ctx)
	if err != nil {
		return adminError(op, key, err)
	}
	k := a.redisKey(key)
	// No deadline; the format's part, the calendar tables, the whole share
	// (core.lua's ARGV[2], in that order); the policy.
	env = strings.TrimSuffix(env, "1") + cal + "1"
	args := []any{"", env, policy}
	for _, e := range extra {
		args = append(args, e)
	}
	args = append(args, who, reason, strconv.Itoa(a.keep), check)
	if err := script.Run(ctx, a.rdb, []string{k, k + ":limit", k + ":history"}, args...).Err(); err != nil {
		return adminError(op, key, err)
	}
	return nil
}

// ErrNotPaused is returned by Client.Resume for a key with no pause in
// force.
var ErrNotPaused = errors.New("admin: the key is not paused")

// Resume ends key's pause now and frees the key at once: the reservations
// granted while the pause was in force move earlier, as if it had ended
// now (the fleet's sleepers read the move within about 250 ms; see
// Reservation.Sleep), unless slots granted before the pause lie later. A
// window band's queue that fills more than the window the pause ends in
// moves by whole windows, into none holding calls granted before the
// pause, under the policy the fleet reports for key; with none reported,
// it does not move. It records the resume in the history, in the same
// script call.
// ErrNotPaused if no pause is in force, ErrUnknownKey as for Pause:
// nothing is written then.
func (a *Client) Resume(ctx context.Context, key, who, reason string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return a.runCore(ctx, "resume", key, resumeScript, who, reason)
}

// A KeyStatus is one key as Redis holds it.
type KeyStatus struct {
	Key string    `json:"key"`
	Now time.Time `json:"now"` // Redis's clock at the read

	// Policy is the limit in force and Source where it comes from:
	// "stored" (an operator's, enforced: its bands in place of the code's
	// bands of the same names, the code's others kept, as far as a
	// Limiter reports them), "code" (the limit the fleet's code passes, as
	// a Limiter last reported it, at Reported) or "unknown" (Policy nil:
	// nothing stored, nothing reported).
	Policy   reserve.Policy `json:"-"`
	Limit    string         `json:"limit"` // Policy.String()
	Source   string         `json:"source"`
	Reported time.Time      `json:"reported,omitzero"`

	// Stored is the stored limit, if any (StoredLimit: its String, "" for
	// none); Shadow says it is in shadow mode.
	Stored      reserve.Policy `json:"-"`
	StoredLimit string         `json:"stored"`
	Shadow      bool           `json:"shadow"`

	// HasState says whether Redis held the key's state (its schedule) at
	// the read; without it the key is idle: every bucket full, no pause.
	HasState bool `json:"has_state"`

	// Reservations counts the slots granted since the key's state was
	// created (it expires when idle): one per reservation, a leased slot
	// whether it is used or not, and a reservation moved to a fresh slot
	// (a sleeper that woke too late) once more. Not the calls the fleet
	// sent: its growth per second is what cmd/pacer shows as slots
	// granted per second.
	Reservations int64         `json:"reservations"`
	Paused       time.Duration `json:"paused_ns"` // time left in a pause
	Bands        []BandStatus  `json:"bands"`

	// Binding is what makes a call wait now: the name of the band a unit
	// cost reserved now would wait longest for (see BandStatus.Wait), or
	// reserve.PauseBinding for a pause in force that no band's queue
	// outlasts; "" when a unit cost would not wait. Frees is that wait:
	// when the binding band (or the pause) lets a unit cost through.
	Binding string        `json:"binding"`
	Frees   time.Duration `json:"frees_ns"`

	// ShadowFigures, with a stored limit in shadow mode, count what it
	// would have done.
	ShadowFigures *ShadowFigures `json:"shadow_figures,omitempty"`

	// Seats is the key's in-flight band (reserve.Band.InFlight): nil when
	// Redis holds no seats record of it (no call for seats lately) and no
	// in-flight N stored.
	Seats *SeatStatus `json:"seats,omitempty"`

	// Tenants are the fair requests' tenants Redis holds for the key (see
	// reserve.Request.Tenant): in each lane, those waiting for their turn
	// and those that booked ahead of the lane's virtual time, at most
	// MaxTenants per lane, the next to book first. Weights are the
	// weights stored by SetWeight, by tenant.
	Tenants []TenantStatus     `json:"tenants,omitempty"`
	Weights map[string]float64 `json:"weights,omitempty"`
}

// MaxTenants is the most tenants per lane Status reads.
const MaxTenants = 100

// A TenantStatus is one tenant of a key's fair requests in one lane.
type TenantStatus struct {
	Tenant string `json:"tenant"`
	Lane   string `json:"lane"` // "urgent", "normal" or "batch"
	// Waiting: deferred and not booked since (its process asks again when
	// told); it stops waiting when booked, or when it has not asked
	// again in time.
	Waiting bool `json:"waiting"`
	// Behind is how far the tenant's next start lies after the lane's
	// virtual time, in the virtual time of the rule (a slot interval per
	// request over the weight): among the waiting tenants the least goes
	// next, and a tenant that booked more than its share lies further
	// behind.
	Behind time.Duration `json:"behind_ns"`
	// Queued is how many of the tenant's requests the fleet's processes
	// hold in this lane, not yet booked, as of each one's last call for
	// it; Oldest, how long the first of them has waited (the longest of
	// the processes', to now).
	Queued int           `json:"queued"`
	Oldest time.Duration `json:"oldest_ns"`
	// Share is the tenant's part of the lane's bookings lately: of the
	// slot time booked, decayed by e every 10 s.
	Share float64 `json:"share"`
}

// A BandStatus is one band of a key's state.
type BandStatus struct {
	Name   string `json:"name"`
	Bucket bool   `json:"bucket"`
	// A bucket: LastSlot is the time from now to the last slot granted
	// (negative once passed). Queued is the units reserved beyond what the
	// bucket holds now that wait for this band: the band that binds (see
	// KeyStatus.Binding), or one whose own wait comes within one unit's
	// spacing of it; 0 for the others, whose reservations' slots another
	// band set and which refill between them (each is charged at its
	// slot, so the arithmetic of their state alone would count the binding
	// band's queue in their units); 0 when nothing waits; a pause is not
	// counted (see KeyStatus.Paused). Spare is the units the bucket holds
	// when the key frees (KeyStatus.Frees from now; now if nothing
	// waits): a non-binding band's headroom, 1 for the binding band
	// freeing a unit cost. Balance is the units it holds now (negative
	// while reservations are queued or a pause is in force). Queued,
	// Spare and Balance are NaN when the band's rate is unknown.
	LastSlot time.Duration `json:"last_slot_ns"`
	Queued   float64       `json:"queued"`
	Spare    float64       `json:"spare"`
	Balance  float64       `json:"balance"`
	// A window: the units reserved in the latest window holding
	// reservations, its N (NaN if unknown), and the time from now to its
	// end.
	Used      float64       `json:"used"`
	N         float64       `json:"n"`
	WindowEnd time.Duration `json:"window_end_ns"`
	// Wait is how long this band alone would make a cost of one unit
	// reserved now wait: a bucket until it holds a unit (its queue, and a
	// pause's emptying), a window until its end when the latest window
	// has no unit left; 0 when the band would not delay it, or when its
	// rate or N is unknown.
	Wait time.Duration `json:"wait_ns"`

	z     time.Duration // a bucket's zero-balance time from now (its state's z)
	rate  float64       // a bucket's rate, 0 if unknown
	burst float64       // and its burst
}

// MarshalJSON writes NaN (unknown) as null.
func (b BandStatus) MarshalJSON() ([]byte, error) {
	type plain BandStatus
	out := struct {
		plain
		Queued  *float64 `json:"queued"`
		Spare   *float64 `json:"spare"`
		Balance *float64 `json:"balance"`
		N       *float64 `json:"n"`
	}{plain: plain(b)}
	num := func(f float64) *float64 {
		if math.IsNaN(f) {
			return nil
		}
		return &f
	}
	out.Queued, out.Spare, out.Balance, out.N = num(b.Queued), num(b.Spare), num(b.Balance), num(b.N)
	return json.Marshal(out)
}

// ShadowFigures count what a stored limit in shadow mode would have done
// since it was set.
type ShadowFigures struct {
	Calls    int64         `json:"calls"`   // reservations granted meanwhile
	Delayed  int64         `json:"delayed"` // how many it would have delayed
	MeanWait time.Duration `json:"mean_wait_ns"`
	MaxWait  time.Duration `json:"max_wait_ns"`
	// Queue is the time from now to the last slot it would have granted.
	Queue time.Duration `json:"queue_ns"`
}

// Status reads key: ErrUnknownKey if Redis knows nothing of it.
func (a *Client) Status(ctx context.Context, key string) (KeyStatus, error) {
	if err := checkKey(key); err != nil {
		return KeyStatus{}, err
	}
	k := a.redisKey(key)
	pipe := a.rdb.Pipeline()
	tm := pipe.Time(ctx)
	state := pipe.Get(ctx, k)
	stored := pipe.Get(ctx, k+":limit")
	shadow := pipe.Get(ctx, k+":shadow")
	reported := pipe.HGet(ctx, a.policiesKey(), key)
	seatsKey, _, nKey := layout.SeatKeys(a.prefix, key)
	seats := pipe.Type(ctx, seatsKey) // TYPE, not EXISTS: the operator's ACL in docs/security.md has it
	storedN := pipe.Get(ctx, nKey)
	_, _ = pipe.Exec(ctx)
	now, err := tm.Result()
	if err != nil {
		return KeyStatus{}, adminError("status", key, err)
	}
	get := func(c *redis.StringCmd) (string, bool, error) {
		v, err := c.Result()
		if errors.Is(err, redis.Nil) {
			return "", false, nil
		}
		if err != nil {
			return "", false, adminError("status", key, err)
		}
		return v, true, nil
	}
	st := KeyStatus{Key: key, Now: now.UTC(), Source: "unknown"}
	stateText, hasState, err := get(state)
	if err != nil {
		return st, err
	}
	storedText, hasStored, err := get(stored)
	if err != nil {
		return st, err
	}
	shadowText, hasShadow, err := get(shadow)
	if err != nil {
		return st, err
	}
	reportText, hasReport, err := get(reported)
	if err != nil {
		return st, err
	}
	nText, hasN, err := get(storedN)
	if err != nil {
		return st, err
	}
	seatsType, err := seats.Result()
	hasSeats := seatsType != "none"
	if err != nil {
		return st, adminError("status", key, err)
	}
	if !hasState && !hasStored && !hasReport && !hasSeats && !hasN {
		return st, fmt.Errorf("admin: status %q: %w", key, ErrUnknownKey)
	}
	if hasSeats || hasN {
		st.Seats = &SeatStatus{Holders: []SeatHolder{}}
		if hasSeats {
			s, err := a.readSeats(ctx, key)
			if err != nil {
				return st, adminError("status", key, err)
			}
			st.Seats = &s
		}
		if hasN {
			if st.Seats.Stored, err = parseStoredN(nText); err != nil {
				return st, fmt.Errorf("admin: status %q: %w", key, err)
			}
		}
	}
	if hasReport {
		ms, text, _ := strings.Cut(reportText, " ")
		var pol reserve.Policy
		if err := pol.UnmarshalText([]byte(text)); err == nil && len(pol) > 0 {
			st.Policy, st.Source = pol, "code"
			if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
				st.Reported = time.UnixMilli(n).UTC()
			}
		}
	}
	if hasStored {
		pol, sh, err := parseStored(storedText)
		if err != nil {
			return st, err
		}
		st.Stored, st.StoredLimit, st.Shadow = pol, pol.String(), sh
		if !sh {
			// Over the code's policy, as core.lua merges them.
			st.Policy, st.Source = mergePolicy(st.Policy, pol), "stored"
		}
	}
	if st.Policy != nil {
		st.Limit = st.Policy.String()
	}
	if hasState {
		st.HasState = true
		if err := st.readState(stateText); err != nil {
			return st, fmt.Errorf("admin: status %q: %w: %w", key, reserve.ErrWrongType, err)
		}
	}
	st.Binding, st.Frees = binding(st.Paused, st.Bands)
	ownQueues(st.Bands, st.Frees)
	if st.Shadow {
		st.ShadowFigures = &ShadowFigures{}
		if hasShadow {
			st.readShadow(shadowText)
		}
	}
	if err := a.readTenants(ctx, k, &st); err != nil {
		return st, adminError("status", key, err)
	}
	return st, nil
}

// fairLanes are the lanes as fair.lua numbers them (1, 2, 3), with the
// suffix of their keys.
var fairLanes = []struct{ name, suffix string }{{"urgent", "u"}, {"normal", "n"}, {"batch", "b"}}

// readTenants reads the fair keys of k (lua/fair.lua) into st.Tenants and
// the stored weights into st.Weights.
func (a *Client) readTenants(ctx context.Context, k string, st *KeyStatus) error {
	pipe := a.rdb.Pipeline()
	lanes := pipe.HGetAll(ctx, k+":fair")
	weights := pipe.HGetAll(ctx, k+":weights")
	var waiting, passes []*redis.ZSliceCmd
	for _, l := range fairLanes {
		waiting = append(waiting, pipe.ZRangeWithScores(ctx, k+":fw:"+l.suffix, 0, MaxTenants-1))
		passes = append(passes, pipe.ZRangeWithScores(ctx, k+":fp:"+l.suffix, 0, MaxTenants-1))
	}
	_, _ = pipe.Exec(ctx)
	h, err := lanes.Result()
	if err != nil {
		return err
	}
	w, err := weights.Result()
	if err != nil {
		return err
	}
	for t, v := range w {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("%w: tenant %q's stored weight %q", reserve.ErrStoredLimit, t, v)
		}
		if st.Weights == nil {
			st.Weights = map[string]float64{}
		}
		st.Weights[t] = f
	}
	nowUS := float64(st.Now.UnixNano()) / 1e3
	for i, l := range fairLanes {
		lane := strconv.Itoa(i + 1)
		vt, _ := strconv.ParseFloat(h["v"+lane], 64)
		seen := map[string]bool{}
		var ts []TenantStatus
		add := func(zs []redis.Z, wait bool) {
			for _, z := range zs {
				t, _ := z.Member.(string)
				if seen[t] {
					continue
				}
				if wait {
					// Waiting that lapsed is dropped by the next fair call.
					till, err := strconv.ParseFloat(h["u"+lane+":"+t], 64)
					if err != nil || till < nowUS {
						continue
					}
				}
				seen[t] = true
				ts = append(ts, TenantStatus{Tenant: t, Lane: l.name, Waiting: wait,
					Behind: time.Duration(max(z.Score-vt, 0) * 1e3)})
			}
		}
		zw, err := waiting[i].Result()
		if err != nil {
			return err
		}
		zp, err := passes[i].Result()
		if err != nil {
			return err
		}
		add(zw, true)
		add(zp, false)
		ts = addFigures(ts, h, lane, l.name, nowUS)
		slices.SortStableFunc(ts, func(x, y TenantStatus) int { return cmp.Compare(x.Behind, y.Behind) })
		st.Tenants = append(st.Tenants, ts[:min(len(ts), MaxTenants)]...)
	}
	return nil
}

// addFigures fills the figures of lane's tenants (Queued, Oldest, Share)
// from the fair hash h (lua/fair.lua), adding the tenants it holds figures
// of and ts does not (by name), and returns ts.
func addFigures(ts []TenantStatus, h map[string]string, lane, name string, nowUS float64) []TenantStatus {
	// Every sum decays to the one instant nowUS, even one last booked
	// after it (Status reads TIME before the fair hash, and a booking may
	// come between): a share is a ratio of two sums, so they must decay
	// alike. Clamped at nowUS, the lane's total, booked after it, did not
	// decay, while a tenant's older sum did only from its own booking to
	// nowUS, not to the total's: the lane's shares added up to 1.002
	// (combination runner, seed 57; TestSharesAddUp).
	decayed := func(rec string) float64 {
		var sum, at float64
		if _, err := fmt.Sscan(rec, &sum, &at); err != nil {
			return 0
		}
		return sum * math.Exp(-(nowUS-at)/10e6)
	}
	total := decayed(h["b"+lane])
	figs := map[string]*TenantStatus{}
	of := func(t string) *TenantStatus {
		if figs[t] == nil {
			figs[t] = &TenantStatus{Tenant: t, Lane: name}
		}
		return figs[t]
	}
	for f, v := range h {
		switch {
		case strings.HasPrefix(f, "b"+lane+" ") && total > 0:
			of(f[len(lane)+2:]).Share = decayed(v) / total
		case strings.HasPrefix(f, "q"+lane+" "):
			id, t, ok := strings.Cut(f[len(lane)+2:], " ")
			var n int
			var since float64
			if _, err := fmt.Sscan(v, &n, &since); !ok || id == "" || err != nil {
				continue
			}
			st := of(t)
			st.Queued += n
			st.Oldest = max(st.Oldest, time.Duration(max(nowUS-since, 0)*1e3))
		}
	}
	for i := range ts {
		if f := figs[ts[i].Tenant]; f != nil {
			ts[i].Queued, ts[i].Oldest, ts[i].Share = f.Queued, f.Oldest, f.Share
			delete(figs, ts[i].Tenant)
		}
	}
	for _, t := range slices.Sorted(maps.Keys(figs)) {
		ts = append(ts, *figs[t])
	}
	return ts
}

// stateFields splits a shadow record ("1 t calls delayed sum max" then
// records, as in a format 1 state) into its head and records.
func stateFields(text string, head int) ([]string, [][3]string, error) {
	f := strings.Fields(text)
	if len(f) < head || f[0] != "1" || (len(f)-head)%3 != 0 {
		return nil, nil, fmt.Errorf("unreadable state %q", text)
	}
	var recs [][3]string
	for i := head; i < len(f); i += 3 {
		recs = append(recs, [3]string{f[i], f[i+1], f[i+2]})
	}
	return f[:head], recs, nil
}

// readState fills st from the state text (core.lua, KEYS[1], either
// format).
func (st *KeyStatus) readState(text string) error {
	ks, err := layout.ParseState(text)
	if err != nil {
		return err
	}
	st.Reservations = ks.Seq
	at := time.UnixMicro(ks.T) // the base of the times, in ns relative to it
	rel := func(ns float64) time.Duration { return at.Add(time.Duration(ns)).Sub(st.Now) }
	if d := rel(ks.PauseNS); d > 0 {
		st.Paused = d
	}
	st.Bands = st.bands(ks.Records, rel)
	return nil
}

// bands reads band records with the policy in force where it names them.
func (st *KeyStatus) bands(recs []layout.Record, rel func(float64) time.Duration) []BandStatus {
	out := make([]BandStatus, 0, len(recs))
	for _, r := range recs {
		var band *reserve.Band
		if i := slices.IndexFunc(st.Policy, func(b reserve.Band) bool { return b.Name == r.Name }); i >= 0 {
			band = &st.Policy[i]
		}
		x, y, isBucket := r.X, r.Y, r.Bucket
		b := BandStatus{Name: r.Name, Bucket: isBucket, Queued: math.NaN(), Spare: math.NaN(), Balance: math.NaN(), N: math.NaN()}
		if isBucket {
			z := rel(x)
			b.LastSlot = rel(y)
			if band != nil && band.Limit != (reserve.Limit{}) {
				b.z, b.rate, b.burst = z, band.Limit.Rate, float64(band.Limit.Burst)
				b.Balance = math.Min(float64(band.Limit.Burst), -z.Seconds()*band.Limit.Rate)
				// A pause leaves the bucket empty at its end: only what
				// is reserved beyond that waits in a queue.
				b.Queued = math.Max(0, (z-st.Paused).Seconds()*band.Limit.Rate)
				b.Wait = max(0, z+time.Duration(float64(time.Second)/band.Limit.Rate))
			}
		} else {
			b.Used = y
			if band != nil && band.Window != (reserve.Window{}) {
				w := band.Window
				b.N = w.N
				_, end := w.Span(int64(x))
				b.WindowEnd = end.Sub(st.Now)
				if y+1 > w.N*(1+1e-9) {
					b.Wait = max(0, b.WindowEnd)
				}
			}
		}
		out = append(out, b)
	}
	return out
}

// binding returns what binds a key with the pause and bands given (see
// KeyStatus.Binding): the pause, unless a band's own wait outlasts it (a
// bucket's queue beyond the pause, a full window ending after it); else
// the band with the longest wait.
func binding(paused time.Duration, bands []BandStatus) (string, time.Duration) {
	name, frees := "", time.Duration(0)
	if paused > 0 {
		name, frees = reserve.PauseBinding, paused
	}
	for _, b := range bands {
		if b.Wait <= frees || (paused > 0 && b.Bucket && !(b.Queued > 0)) {
			continue
		}
		name, frees = b.Name, b.Wait
	}
	return name, frees
}

// ownQueues leaves each bucket band of bands (binding computed) its own
// figures, the key freeing frees from now: its Queued only if its wait
// comes within one unit's spacing of frees (it binds, or as good as), and
// its Spare then.
func ownQueues(bands []BandStatus, frees time.Duration) {
	for i := range bands {
		b := &bands[i]
		if !b.Bucket || b.rate == 0 {
			continue
		}
		spacing := time.Duration(float64(time.Second) / b.rate)
		if b.Wait+spacing < frees {
			b.Queued = 0
		}
		b.Spare = math.Min(b.burst, (frees-b.z).Seconds()*b.rate)
	}
}

// readShadow fills st.ShadowFigures from the shadow text (reserve.lua,
// KEYS[3]).
func (st *KeyStatus) readShadow(text string) {
	head, recs, err := stateFields(text, 6)
	if err != nil {
		return
	}
	t, _ := strconv.ParseInt(head[1], 10, 64)
	calls, _ := strconv.ParseInt(head[2], 10, 64)
	delayed, _ := strconv.ParseInt(head[3], 10, 64)
	sum, _ := strconv.ParseFloat(head[4], 64)
	most, _ := strconv.ParseFloat(head[5], 64)
	f := st.ShadowFigures
	f.Calls, f.Delayed = calls, delayed
	if calls > 0 {
		f.MeanWait = time.Duration(sum / float64(calls) * 1000)
	}
	f.MaxWait = time.Duration(most * 1000)
	at := time.UnixMicro(t)
	for _, r := range recs {
		if strings.Contains(r[1], ".") {
			e, _ := strconv.ParseFloat(r[2], 64)
			f.Queue = max(f.Queue, at.Add(time.Duration(e)).Sub(st.Now))
		}
	}
}

// Keys returns the keys whose names match pattern (Redis glob syntax, on
// the key as the fleet passes it, braces included; "" or "*" for all),
// sorted: those with a state, a stored limit, a policy reported by a
// Limiter, seats taken lately or a stored in-flight N.
func (a *Client) Keys(ctx context.Context, pattern string) ([]string, error) {
	if pattern == "" {
		pattern = "*"
	}
	// Keys are stored escaped (RedisKey): so is the pattern's text.
	pattern = layout.Escape(pattern)
	// A Cluster's masters are scanned at once (ForEachMaster): seen is
	// written under mu.
	var mu sync.Mutex
	seen := map[string]bool{}
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		it := c.Scan(ctx, 0, a.prefix+"{"+pattern+"}*", 1000).Iterator()
		for it.Next(ctx) {
			rk := it.Val()
			rest := strings.TrimPrefix(rk, a.prefix+"{")
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				continue
			}
			name, suffix := rest[:end], rest[end+1:]
			if name == "limiters" || (suffix != "" && suffix != ":limit" && suffix != ":seats" && suffix != ":seatn") {
				continue
			}
			mu.Lock()
			seen[layout.Unescape(name)] = true
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	if cc, ok := a.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, a.rdb)
	}
	if err != nil {
		return nil, adminError("keys", pattern, err)
	}
	reported, err := a.rdb.HKeys(ctx, a.policiesKey()).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, adminError("keys", pattern, err)
	}
	for _, k := range reported {
		if ok, _ := globMatch(pattern, layout.Escape(k)); ok {
			seen[k] = true
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out, nil
}

// globMatch matches s against a Redis glob pattern: '*', '?', '[...]' and
// '\' escapes.
func globMatch(pattern, s string) (bool, error) {
	for len(pattern) > 0 {
		switch pattern[0] {
		case '*':
			for i := len(s); i >= 0; i-- {
				if ok, _ := globMatch(pattern[1:], s[i:]); ok {
					return true, nil
				}
			}
			return false, nil
		case '?':
			if s == "" {
				return false, nil
			}
			pattern, s = pattern[1:], s[1:]
		case '[':
			end := strings.IndexByte(pattern[1:], ']')
			if end < 0 || s == "" {
				return false, nil
			}
			set, neg := pattern[1:1+end], false
			if strings.HasPrefix(set, "^") {
				set, neg = set[1:], true
			}
			in := false
			for i := 0; i < len(set); i++ {
				if i+2 < len(set) && set[i+1] == '-' {
					if set[i] <= s[0] && s[0] <= set[i+2] {
						in = true
					}
					i += 2
				} else if set[i] == s[0] {
					in = true
				}
			}
			if in == neg {
				return false, nil
			}
			pattern, s = pattern[2+end:], s[1:]
		case '\\':
			if len(pattern) > 1 {
				pattern = pattern[1:]
			}
			fallthrough
		default:
			if s == "" || s[0] != pattern[0] {
				return false, nil
			}
			pattern, s = pattern[1:], s[1:]
		}
	}
	return s == "", nil
}

// A Member is one Limiter of the fleet, as its heartbeats show it.
type Member struct {
	ID    string    `json:"id"`
	Mode  string    `json:"mode"`  // "redis" or "local" (pacing on its share, Redis unavailable)
	Since time.Time `json:"since"` // when that mode began (the Limiter's clock)
	Heard time.Time `json:"heard"` // its last heartbeat (Redis's clock)
	// Writes is the state format it writes ("1", "2" or "3", see
	// SetFormat), or "" for a member of a release before the setting
	// existed: it writes format 1 and reads no other.
	Writes string `json:"writes"`
	// Reads is the highest state format it reads: "3" for a member of this
	// release, "" for an earlier one (it reads format 2 at most, format 1
	// alone if Writes is "").
	Reads string `json:"reads,omitempty"`
}

// Fleet returns the Limiters heard from within the fleet's SilentHold, the
// most recently heard first.
func (a *Client) Fleet(ctx context.Context) ([]Member, error) {
	k := a.prefix + "{limiters}"
	pipe := a.rdb.Pipeline()
	zs := pipe.ZRangeWithScores(ctx, k, 0, -1)
	info := pipe.HGetAll(ctx, k+":info")
	writes := pipe.HGetAll(ctx, layout.WritersKey(a.prefix))
	reads := pipe.HGetAll(ctx, layout.ReadersKey(a.prefix))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, adminError("fleet", "", err)
	}
	details := info.Val()
	out := make([]Member, 0, len(zs.Val()))
	for _, z := range zs.Val() {
		id, _ := z.Member.(string)
		m := Member{ID: id, Heard: time.UnixMilli(int64(z.Score)).UTC(), Mode: "unknown", Writes: writes.Val()[id], Reads: reads.Val()[id]}
		if f := strings.Fields(details[id]); len(f) >= 2 {
			m.Mode = f[0]
			if ms, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				m.Since = time.UnixMilli(ms).UTC()
			}
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(x, y Member) int { return y.Heard.Compare(x.Heard) })
	return out, nil
}

var (
	adminScript  = redis.NewScript(lua.Admin)
	pauseScript  = redis.NewScript(lua.Pause)
	resumeScript = redis.NewScript(lua.Resume)
)

// scriptCodes maps the scripts' error codes to reserve's sentinels, as a
// Limiter does.
var scriptCodes = map[string]error{
	"PACER_WRONGTYPE": reserve.ErrWrongType,
	"PACER_EXCEEDS":   reserve.ErrStoredLimit,
	"PACER_CONFIG":    reserve.ErrStoredLimit,
	"WRONGTYPE":       reserve.ErrWrongType, // a command Redis refused itself
}

// checkKey reports an empty key.
func checkKey(key string) error {
	switch key {
	case "":
		return fmt.Errorf("admin: %w", reserve.ErrEmptyKey)
	case layout.FleetName:
		return fmt.Errorf("admin: %w", reserve.ErrReservedKey)
	}
	return nil
}

// units returns the units pol's bands charge, in order, once each (a
// band's Unit, or its Name: see reserve.Band).
func units(pol reserve.Policy) []string {
	var out []string
	for _, b := range pol {
		if u := cmp.Or(b.Unit, b.Name); !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}
