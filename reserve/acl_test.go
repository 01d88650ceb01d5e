package reserve_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// aclBackend is a throwaway redis-server on which the Limiters log in as a
// user with only redistest.ACLRules.
func aclBackend(t *testing.T) backend {
	s := redistest.NewProcess(t)
	return backend{client: s.Client, user: redistest.ACLUser(t, s, redistest.ACLRules...), elapse: time.Sleep, routed: true}
}

// TestContractACL runs the contract suite with the Limiters logged in as a
// user holding only redistest.ACLRules.
func TestContractACL(t *testing.T) { runContract(t, aclBackend(t)) }

// TestACLDenied: a user missing a command pacer needs gets a clear error
// naming it (the script error Redis gives), and pacer does not hide it behind local
// pacing: it is a configuration error, not an outage.
func TestACLDenied(t *testing.T) {
	s := redistest.NewProcess(t)
	ctx := context.Background()
	var args []any
	for _, r := range redistest.ACLRules {
		if r != "+zadd" { // the heartbeat's first write
			args = append(args, r)
		}
	}
	require.NoError(t, s.Client.Do(ctx, append([]any{"ACL", "SETUSER", "pacer"}, args...)...).Err())
	opts := *s.Client.Options()
	opts.Username, opts.Password = "pacer", "pacer-secret"
	user := redis.NewClient(&opts)
	t.Cleanup(func() { user.Close() })
	l, err := reserve.New(user, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet, RequireRedis: true})
	if err == nil {
		l.Close()
	}
	require.Error(t, err, "New with a user denied ZADD")
	require.Contains(t, err.Error(), "can't run this command", "the error names the denied command")
	require.NotErrorIs(t, err, reserve.ErrUnavailable, "a denied command is not an outage")
}

// TestAdminACL: an operator's user with redistest.ACLRules and the commands
// docs/security.md adds for it runs every Admin operation, on a key a
// Limiter (the Limiters' user) paces.
func TestAdminACL(t *testing.T) {
	s := redistest.NewProcess(t)
	ctx := context.Background()
	login := func(name string, extra ...string) *redis.Client {
		args := []any{"ACL", "SETUSER", name}
		for _, r := range append(append([]string{}, redistest.ACLRules...), extra...) {
			args = append(args, r)
		}
		require.NoError(t, s.Client.Do(ctx, args...).Err())
		opts := *s.Client.Options()
		opts.Username, opts.Password = name, "pacer-secret"
		c := redis.NewClient(&opts)
		t.Cleanup(func() { c.Close() })
		return c
	}
	prefix := redistest.Prefix(t)
	l, err := reserve.New(login("pacer"), reserve.Options{KeyPrefix: prefix, Logger: quiet, FailClosed: true, HeartbeatInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	closeLimiter(t, l)
	a, err := admin.New(login("operator", "+type", "+lpush", "+ltrim", "+lrange", "+scan", "+hget", "+hkeys", "+zrange", "+hgetall"),
		admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)
	require.Equal(t, 1, l.FleetSize(), "the heartbeat learned the fleet under the ACL")
	code := reserve.Limit{Rate: 10, Burst: 1}
	_, err = l.Reserve(ctx, "api", code)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := a.Status(ctx, "api")
		return err == nil && st.Source == "code"
	}, 10*time.Second, 10*time.Millisecond, "the heartbeat reports the code's policy")
	_, err = a.SetLimit(ctx, "api", reserve.Limit{Rate: 5, Burst: 1}.Policy(), true, "ops", "try")
	require.NoError(t, err)
	_, err = l.Reserve(ctx, "api", code) // counted in shadow, as the Limiters' user
	require.NoError(t, err)
	require.NoError(t, a.Pause(ctx, "api", time.Minute, "ops", "incident"))
	require.NoError(t, a.Resume(ctx, "api", "ops", "over"))
	st, err := a.Status(ctx, "api")
	require.NoError(t, err)
	require.NotNil(t, st.ShadowFigures)
	require.EqualValues(t, 1, st.ShadowFigures.Calls)
	_, err = a.UnsetLimit(ctx, "api", "ops", "done")
	require.NoError(t, err)
	// A stored weight, read by a fair call as the Limiters' user.
	_, err = a.SetWeight(ctx, "api", "acme", 2, "ops", "plan")
	require.NoError(t, err)
	fair := reserve.Single("api", code, 1)
	fair.Tenant = "acme"
	_, err = l.ReserveN(ctx, fair)
	require.NoError(t, err)
	st, err = a.Status(ctx, "api")
	require.NoError(t, err)
	require.Equal(t, map[string]float64{"acme": 2}, st.Weights)
	_, err = a.UnsetWeight(ctx, "api", "acme", "ops", "plan over")
	require.NoError(t, err)
	h, err := a.History(ctx, "api")
	require.NoError(t, err)
	require.Len(t, h, 6)
	keys, err := a.Keys(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"api"}, keys)
	fleet, err := a.Fleet(ctx)
	require.NoError(t, err)
	require.Len(t, fleet, 1)
	// The state format: switched to 2, the Limiter follows, and back to 1
	// with the key rewritten.
	_, err = a.SetFormat(ctx, 2, admin.FormatOptions{Who: "ops", Reason: "upgraded"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		fleet, err := a.Fleet(ctx)
		return err == nil && len(fleet) == 1 && fleet[0].Writes == "2"
	}, 10*time.Second, 10*time.Millisecond, "the Limiter writes format 2")
	_, err = l.Reserve(ctx, "api", code)
	require.NoError(t, err)
	_, err = a.SetFormat(ctx, 1, admin.FormatOptions{Who: "ops", Reason: "rollback"})
	require.NoError(t, err)
	fs, err := a.Format(ctx)
	require.NoError(t, err)
	require.Equal(t, []int{1, 1, 0}, []int{fs.Setting, fs.Format1, fs.Format2})
	require.Len(t, fs.History, 2)
}

// TestExitWithoutCloseACL: with the permissions docs/security.md adds for
// it (client|setname, client|id, client|list, info), a Limiter killed
// without Close gives its share back as soon as the fleet finds its
// connection gone, not after SilentHold (10 min here).
func TestExitWithoutCloseACL(t *testing.T) {
	s := redistest.NewProcess(t)
	user := redistest.ACLUser(t, s, append(slices.Clone(redistest.ACLRules), "+client|setname", "+client|id", "+client|list", "+info")...)
	lopts := reserve.Options{KeyPrefix: redistest.Prefix(t), HeartbeatInterval: 100 * time.Millisecond, SilentHold: 10 * time.Minute, Logger: quiet}
	a, err := reserve.New(user, lopts)
	require.NoError(t, err)
	closeLimiter(t, a)
	b, err := reserve.New(user, lopts)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.FleetSize() == 2 && b.FleetSize() == 2 }, 30*time.Second, 5*time.Millisecond)
	b.Kill()
	require.Eventually(t, func() bool { return a.FleetSize() == 1 }, 30*time.Second, 5*time.Millisecond,
		"a still counts b (size %d)", a.FleetSize())
}
