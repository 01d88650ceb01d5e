package reserve_test

import (
	"strings"

	"github.com/redis/go-redis/v9"
)

// passHook gives a test's go-redis hook the methods it leaves alone: dials
// and pipelines go through as they are. A hook embeds it and writes its
// ProcessHook (and its ProcessPipelineHook, if pipelines concern it).
type passHook struct{}

func (passHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (passHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// scriptKey returns the first key of a script call (EVALSHA, or the EVAL
// go-redis sends after NOSCRIPT, with a key); false for any other command.
func scriptKey(cmd redis.Cmder) (string, bool) {
	args := cmd.Args()
	if len(args) < 4 {
		return "", false
	}
	switch strings.ToLower(cmd.Name()) {
	case "evalsha", "eval":
		k, ok := args[3].(string)
		return k, ok
	}
	return "", false
}
