package admin

import (
	"context"
	"testing"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSetExpects: admin.lua writes a set computed from a stored limit only
// over that limit (SetBands' compare-and-set): over another, or over none
// when one was expected, it writes nothing.
func TestSetExpects(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	a, err := New(s.Client, Options{KeyPrefix: prefix})
	require.NoError(t, err)
	const one, two = "enforce 1 permits permits b 1 1", "enforce 1 permits permits b 2 1"
	limit := a.redisKey("k") + ":limit"
	history := a.redisKey("k") + ":history"

	_, err = a.run(ctx, "k", "set", one, "ops", "x", "", "="+one)
	assert.ErrorIs(t, err, errChanged, "expected one, none stored")
	_, err = a.run(ctx, "k", "set", one, "ops", "x", "", "=")
	require.NoError(t, err, "expected none, none stored")
	_, err = a.run(ctx, "k", "set", two, "ops", "x", "", "=")
	assert.ErrorIs(t, err, errChanged, "expected none, one stored")
	_, err = a.run(ctx, "k", "set", two, "ops", "x", "", "="+two)
	assert.ErrorIs(t, err, errChanged, "expected another")
	v, err := s.Client.Get(ctx, limit).Result()
	require.NoError(t, err)
	assert.Equal(t, one, v, "a refused set wrote")
	n, err := s.Client.LLen(ctx, history).Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "a refused set was recorded")
	_, err = a.run(ctx, "k", "set", two, "ops", "x", "", "="+one)
	require.NoError(t, err, "expected the one stored")
	v, err = s.Client.Get(ctx, limit).Result()
	require.NoError(t, err)
	assert.Equal(t, two, v)
}
