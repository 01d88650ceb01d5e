package reserve_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/require"
)

// TestRedisLogger: go-redis's lines go to the logger at Debug level, so a
// handler at Info drops them and one at Debug keeps them, formatted.
func TestRedisLogger(t *testing.T) {
	ctx := context.Background()
	var info, debug bytes.Buffer
	reserve.RedisLogger(slog.New(slog.NewTextHandler(&info, nil))).Printf(ctx, "dial %s: %v", "127.0.0.1:1", "connection refused")
	require.Empty(t, info.String())
	reserve.RedisLogger(slog.New(slog.NewTextHandler(&debug, &slog.HandlerOptions{Level: slog.LevelDebug}))).
		Printf(ctx, "dial %s: %v", "127.0.0.1:1", "connection refused")
	require.Contains(t, debug.String(), `level=DEBUG msg="go-redis: dial 127.0.0.1:1: connection refused"`)
}
