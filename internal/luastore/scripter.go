package luastore

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Store as a go-redis redis.Scripter: EVAL, EVALSHA, their read-only
// forms, SCRIPT EXISTS and SCRIPT LOAD, with replies and errors as a
// go-redis client gives them (a nil reply is redis.Nil, an error reply an
// Error, which satisfies redis.Error). EVALSHA of a script never loaded
// fails with "NOSCRIPT ...", so redis.Script.Run falls back to EVAL as it
// does with Redis.

var _ redis.Scripter = (*Store)(nil)

// Eval runs script (compiled once and cached by its SHA1, as EVAL caches
// it) with keys and args.
func (s *Store) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.eval(ctx, "eval", script, sha1Hex(script), true, keys, args, false)
}

// EvalSha runs the script of SHA1 sha1, loaded before by Eval or
// ScriptLoad.
func (s *Store) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.eval(ctx, "evalsha", sha1, strings.ToLower(sha1), false, keys, args, false)
}

// EvalRO is Eval for a script that may not write (EVAL_RO): a command
// that writes fails with Redis's error.
func (s *Store) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.eval(ctx, "eval_ro", script, sha1Hex(script), true, keys, args, true)
}

// EvalShaRO is EvalSha for a script that may not write (EVALSHA_RO).
func (s *Store) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.eval(ctx, "evalsha_ro", sha1, strings.ToLower(sha1), false, keys, args, true)
}

// ScriptExists reports for each hash whether its script is loaded.
func (s *Store) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	args := []any{"script", "exists"}
	for _, h := range hashes {
		args = append(args, h)
	}
	cmd := redis.NewBoolSliceCmd(ctx, args...)
	s.mu.Lock()
	defer s.unlock()
	out := make([]bool, len(hashes))
	for i, h := range hashes {
		out[i] = s.scripts[strings.ToLower(h)] != nil
	}
	cmd.SetVal(out)
	return cmd
}

// ScriptLoad compiles and caches script and returns its SHA1.
func (s *Store) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	cmd := redis.NewStringCmd(ctx, "script", "load", script)
	sha := sha1Hex(script)
	s.mu.Lock()
	defer s.unlock()
	if _, err := s.load(sha, script, true); err != nil {
		cmd.SetErr(err)
		return cmd
	}
	cmd.SetVal(sha)
	return cmd
}

// eval runs a script: payload is its source (hasSrc) or its SHA1 (name
// "evalsha"); the reply goes into a *redis.Cmd built as go-redis builds
// it for the same call.
func (s *Store) eval(ctx context.Context, name, payload, sha string, hasSrc bool, keys []string, args []any, readOnly bool) *redis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, name, payload, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(cmdArgs, args...)
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if err := ctx.Err(); err != nil {
		cmd.SetErr(err)
		return cmd
	}
	argv, err := argStrings(args)
	if err != nil {
		cmd.SetErr(err)
		return cmd
	}
	src := ""
	if hasSrc {
		src = payload
	}
	s.mu.Lock()
	defer s.unlock()
	p, err := s.load(sha, src, hasSrc)
	if err != nil {
		cmd.SetErr(err)
		return cmd
	}
	s.tick()
	val, err := replyToGo(s.run(p, sha, keys, argv, readOnly))
	if err != nil {
		cmd.SetErr(err)
		return cmd
	}
	cmd.SetVal(val)
	return cmd
}
