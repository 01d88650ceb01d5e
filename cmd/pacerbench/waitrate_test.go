package main

import (
	"strings"
	"testing"
)

// TestQuickTuning: PACERBENCH_WAITRATE_QUICK names the quick-start
// client's changes, each row says which, and a wrong value is an error
// naming the variable.
func TestQuickTuning(t *testing.T) {
	for _, c := range []struct {
		env   string
		want  quickTune
		label string
	}{
		{"", quickTune{}, "pacer, quick-start client"},
		{"pool", quickTune{pool: true}, "pacer, quick-start client, pool sized"},
		{"idle", quickTune{idle: true}, "pacer, quick-start client, MinIdleConns"},
		{"pool, idle", quickTune{pool: true, idle: true}, "pacer, quick-start client, pool sized, MinIdleConns"},
		{"idle,pool", quickTune{pool: true, idle: true}, "pacer, quick-start client, pool sized, MinIdleConns"},
	} {
		t.Setenv(waitQuickEnv, c.env)
		got, err := quickTuning()
		if err != nil || got != c.want {
			t.Errorf("%s=%q: %+v, err %v; want %+v, nil", waitQuickEnv, c.env, got, err, c.want)
		}
		if got := quickLabel(got); got != c.label {
			t.Errorf("%s=%q: label %q, want %q", waitQuickEnv, c.env, got, c.label)
		}
	}
	// "dial" opened the caller's connections, which pacer's copy of the
	// client never uses: refused, saying so.
	t.Setenv(waitQuickEnv, "pool,dial")
	if got, err := quickTuning(); err == nil || !strings.Contains(err.Error(), "copy") || got != (quickTune{}) {
		t.Errorf("%s=pool,dial: %+v, err %v; want an error saying pacer uses its own copy", waitQuickEnv, got, err)
	}
	for _, bad := range []string{"pools", "pool,", "tuned", " ", "dial"} {
		t.Setenv(waitQuickEnv, bad)
		if got, err := quickTuning(); err == nil || !strings.Contains(err.Error(), waitQuickEnv) || got != (quickTune{}) {
			t.Errorf("%s=%q: %+v, err %v; want an error naming the variable", waitQuickEnv, bad, got, err)
		}
	}
}
