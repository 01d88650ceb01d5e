package combo

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// Action is one step the runner took, as it happened: an operator's action,
// a provider's pause it asked for, or a fault (At its injection, End once
// mended).
type Action struct {
	Kind  Kind
	Key   string
	Child string // FaultKill, FaultClose: the process killed or closed; FaultStall, LocalPause: the process
	// Started: FaultKill, FaultClose: the process started again in the slot.
	Started string
	At      int64 // Unix ns, when the action began
	End     int64 // Unix ns, when it returned (a fault: when it was mended)
	For     time.Duration
	Stored  reserve.Policy
	Format  int // OpFormat
	// Node: on a Cluster, the master a Redis fault struck, or whose slots
	// FaultReshard moved (Event.Node).
	Node int `json:",omitempty"`
	// Moved: FaultReshard and FaultFailover, what moved ("to master 2:
	// sliding.example's slot 3123 (8 keys), ...", "replica ... took over
	// from ...").
	Moved string `json:",omitempty"`
	// Stopped: FaultRestart, when the server's stop returned (its data
	// gone); At is when it was asked for. 0 in dumps made before it was
	// recorded: At is used.
	Stopped int64 `json:",omitempty"`
	Err     string
	// Expected is true when Err is what the action may meet in the run
	// (Redis down, a key it restarted empty does not know, nothing to
	// unset or resume); other errors are violations.
	Expected bool
}

// operator plays the operator's actions and asks for the provider's pauses.
type operator struct {
	rdb      redis.UniversalClient
	admin    *admin.Client
	provider string
	http     *http.Client
	seed     uint64
}

func newOperator(at redisAt, prefix, provider string, seed uint64) (*operator, error) {
	rdb := at.client(redis.UniversalOptions{MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	ac, err := admin.New(rdb, admin.Options{KeyPrefix: prefix})
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return &operator{rdb: rdb, admin: ac, provider: provider, seed: seed, http: &http.Client{Timeout: 5 * time.Second}}, nil
}

func (o *operator) close() { _ = o.rdb.Close() }

// do plays e and returns what happened.
func (o *operator) do(e Event) Action {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	a := Action{Kind: e.Kind, Key: e.Key, For: e.For, Stored: e.Stored, Format: e.Format, At: time.Now().UnixNano()}
	who, why := "combo", fmt.Sprintf("seed %d", o.seed)
	var err error
	switch e.Kind {
	case OpSet, OpShadow:
		if e.At%2 == 0 {
			// Half of them (by the event's time, so a seed replays the
			// same) through SetBands, as pacer set --band --replace does:
			// the same stored limit, by the compare-and-set and the band
			// checks.
			_, err = o.admin.SetBands(ctx, e.Key, e.Stored, admin.SetOptions{Shadow: e.Kind == OpShadow, Replace: true}, who, why)
		} else {
			_, err = o.admin.SetLimit(ctx, e.Key, e.Stored, e.Kind == OpShadow, who, why)
		}
	case OpUnset:
		_, err = o.admin.UnsetLimit(ctx, e.Key, who, why)
	case OpPause:
		err = o.admin.Pause(ctx, e.Key, e.For, who, why)
	case OpResume:
		err = o.admin.Resume(ctx, e.Key, who, why)
	case OpWeight:
		if e.Weight > 0 {
			_, err = o.admin.SetWeight(ctx, e.Key, e.Tenant, e.Weight, who, why)
		} else {
			_, err = o.admin.UnsetWeight(ctx, e.Key, e.Tenant, who, why)
		}
		if err == nil || errors.Is(err, admin.ErrNotStored) {
			err = cmpOr(o.checkTenants(ctx, e.Key), err)
		}
	case OpFormat:
		// A switch to 1 waits for every member's next heartbeat, then
		// rewrites the keys: longer than the other actions.
		fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = o.admin.SetFormat(fctx, e.Format, admin.FormatOptions{Who: who, Reason: why, Wait: 5 * time.Second})
		fcancel()
	case ProviderPause:
		err = o.announce(ctx, e.Key, e.For)
	default:
		err = fmt.Errorf("operator: %q is not an action", e.Kind)
	}
	a.End = time.Now().UnixNano()
	if err != nil {
		a.Err = err.Error()
		a.Expected = errors.Is(err, reserve.ErrUnavailable) || errors.Is(err, admin.ErrUnknownKey) ||
			errors.Is(err, admin.ErrNotStored) || errors.Is(err, admin.ErrNotPaused) ||
			errors.Is(err, admin.ErrMembersBehind) || // a member pacing locally, or killed, hears nothing

			errors.Is(err, context.DeadlineExceeded)
	}
	return a
}

// checkTenants reads key's Status and checks its tenants' figures: every
// queue and wait at least 0, every share in [0, 1], a lane's shares adding
// up to 1 at most, within shareSlack.
func (o *operator) checkTenants(ctx context.Context, key string) error {
	st, err := o.admin.Status(ctx, key)
	if err != nil {
		return err
	}
	sum := map[string]float64{}
	for _, ts := range st.Tenants {
		if ts.Queued < 0 || ts.Oldest < 0 || ts.Behind < 0 || !(ts.Share >= 0 && ts.Share <= 1+1e-9) {
			return fmt.Errorf("status of %s: tenant %q's figures out of range: %+v", key, ts.Tenant, ts)
		}
		sum[ts.Lane] += ts.Share
	}
	for lane, s := range sum {
		if s > 1+shareSlack {
			return fmt.Errorf("status of %s: the %s lane's shares add up to %v", key, lane, s)
		}
	}
	return nil
}

// shareSlack: the shares are ratios of sums the scripts and Status decay
// to one instant (lua/fair.lua, admin's addFigures): only rounding parts
// them from an exact partition. Seeds 4 and 57 read a lane's shares adding
// up to 1.0000119 and 1.0021: Status decayed a lane's total booked after
// the TIME it read by nothing, and its tenants' older sums by less than
// the total's (admin's TestSharesAddUp).
const shareSlack = 1e-9

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// announce tells the provider to answer the next call on key with a 429
// and Retry-After d.
func (o *operator) announce(ctx context.Context, key string, d time.Duration) error {
	url := fmt.Sprintf("%s/announce?key=%s&d=%d", o.provider, key, d.Nanoseconds())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	resp, err := o.http.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("announce: %s", resp.Status)
	}
	return nil
}
