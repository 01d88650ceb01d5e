package redistest

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// ACLRules is the smallest Redis ACL pacer works with (docs/security.md):
// its keys (here the tests' prefix; pacer's default is pacer:*), the
// scripts, GET (Sleep's pause check), CONFIG GET (the eviction check, which
// is skipped when denied), and the commands the scripts call. ACL checks
// every command a script runs too.
var ACLRules = []string{
	"on", ">pacer-secret", "resetkeys", "~pacertest:*", "resetchannels", "-@all",
	"+evalsha", "+eval", "+script|load", "+get", "+ping", "+config|get",
	// called by the scripts
	"+time", "+set", "+del", "+pttl", "+pexpire",
	"+zadd", "+zrem", "+zcard", "+zcount", "+zrangebyscore", "+zremrangebyscore", "+zrange", "+zscore", "+hset", "+hmget", "+hdel",
}

// ACLUser sets up user "pacer" on s with rules, and returns a client
// logged in as it.
func ACLUser(t testing.TB, s *Server, rules ...string) *redis.Client {
	t.Helper()
	args := []any{"ACL", "SETUSER", "pacer"}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := s.Client.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("redistest: ACL SETUSER pacer: %v", err)
	}
	opts := *s.Client.Options()
	opts.Username, opts.Password = "pacer", "pacer-secret"
	user := redis.NewClient(&opts)
	t.Cleanup(func() { user.Close() })
	return user
}
