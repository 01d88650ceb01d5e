package lua_test

import "os"

// How much of the rule tests runs (share_test.go, lattice_test.go,
// mixed_test.go, resume_test.go). Every case of their lists runs, always;
// their random trials and the lengths of their runs are a prefix of the
// same seeded draws: a part by default, the whole with PACER_RULES=full,
// some 220,000 script calls. A call costs tens of µs on a luastore Store
// or a redis-server, and hundreds on a Store under -race.
var fullRules = os.Getenv("PACER_RULES") == "full"

// trials returns full with PACER_RULES=full, else quick.
func trials(full, quick int) int {
	if fullRules {
		return full
	}
	return quick
}
