package reserve

import (
	"context"
	"fmt"
	"log/slog"
)

// RedisLogger routes go-redis's own log lines (connection pool and dial
// errors, printed to stderr by default, several per failed call while Redis
// is down) to logger at Debug level, where a handler at the default Info
// level drops them. pacer's own log already names each outage once, with
// its cause, when it starts and when it ends. go-redis's logger is global
// to the process, and go-redis cannot tell whether the program set one of
// its own, so pacer never sets it; do so in main, as README's quick start
// (the package Example) does:
//
//	redis.SetLogger(reserve.RedisLogger(slog.Default()))
//
// A nil logger is slog.Default().
func RedisLogger(logger *slog.Logger) interface {
	Printf(ctx context.Context, format string, v ...any)
} {
	if logger == nil {
		logger = slog.Default()
	}
	return redisLogger{logger}
}

type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if !r.l.Enabled(ctx, slog.LevelDebug) {
		return
	}
	r.l.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}
