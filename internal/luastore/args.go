package luastore

import (
	"encoding"
	"fmt"
	"net"
	"strconv"
	"time"
)

// Script arguments as go-redis sends them: a call's arguments become the
// strings Redis receives in ARGV by go-redis's rules (commands.go's
// appendArgs and internal/proto's WriteArg, go-redis v9), so that a script
// sees the same ARGV on a Store as on Redis.

// argStrings returns args as ARGV strings. A single argument that is a
// []string, []any or map is spread, as go-redis spreads it; a nil single
// argument is none.
func argStrings(args []any) ([]string, error) {
	if len(args) == 1 {
		switch a := args[0].(type) {
		case []string:
			return append([]string(nil), a...), nil
		case []any:
			args = a
		case map[string]any:
			args = nil
			for k, v := range a {
				args = append(args, k, v)
			}
		case map[string]string:
			args = nil
			for k, v := range a {
				args = append(args, k, v)
			}
		case nil:
			return nil, nil
		}
	}
	out := make([]string, len(args))
	for i, a := range args {
		s, err := argString(a)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

// argString is go-redis's WriteArg: a string as is, integers in decimal,
// floats with strconv.FormatFloat(f, 'f', -1, 64), a bool as 1 or 0, a
// time in RFC 3339 with ns, a duration in ns, a BinaryMarshaler's bytes.
func argString(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case *string:
		if v == nil {
			return "", nil
		}
		return *v, nil
	case []byte:
		return string(v), nil
	case int:
		return strconv.FormatInt(int64(v), 10), nil
	case *int:
		return ptrInt(v)
	case int8:
		return strconv.FormatInt(int64(v), 10), nil
	case *int8:
		return ptrInt(v)
	case int16:
		return strconv.FormatInt(int64(v), 10), nil
	case *int16:
		return ptrInt(v)
	case int32:
		return strconv.FormatInt(int64(v), 10), nil
	case *int32:
		return ptrInt(v)
	case int64:
		return strconv.FormatInt(v, 10), nil
	case *int64:
		return ptrInt(v)
	case uint:
		return strconv.FormatUint(uint64(v), 10), nil
	case *uint:
		return ptrUint(v)
	case uint8:
		return strconv.FormatUint(uint64(v), 10), nil
	case *uint8:
		return ptrUint(v)
	case uint16:
		return strconv.FormatUint(uint64(v), 10), nil
	case *uint16:
		return ptrUint(v)
	case uint32:
		return strconv.FormatUint(uint64(v), 10), nil
	case *uint32:
		return ptrUint(v)
	case uint64:
		return strconv.FormatUint(v, 10), nil
	case *uint64:
		return ptrUint(v)
	case uintptr:
		return strconv.FormatUint(uint64(v), 10), nil
	case *uintptr:
		return ptrUint(v)
	case float32:
		return strconv.FormatFloat(float64(v), 'f', -1, 64), nil
	case *float32:
		if v == nil {
			return "0", nil
		}
		return strconv.FormatFloat(float64(*v), 'f', -1, 64), nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case *float64:
		if v == nil {
			return "0", nil
		}
		return strconv.FormatFloat(*v, 'f', -1, 64), nil
	case bool:
		return boolArg(v), nil
	case *bool:
		return boolArg(v != nil && *v), nil
	case time.Time:
		return v.Format(time.RFC3339Nano), nil
	case *time.Time:
		if v == nil {
			v = &time.Time{}
		}
		return v.Format(time.RFC3339Nano), nil
	case time.Duration:
		return strconv.FormatInt(v.Nanoseconds(), 10), nil
	case *time.Duration:
		if v == nil {
			return "0", nil
		}
		return strconv.FormatInt(v.Nanoseconds(), 10), nil
	case encoding.BinaryMarshaler:
		b, err := v.MarshalBinary()
		if err != nil {
			return "", err
		}
		return string(b), nil
	case net.IP:
		return string(v), nil
	}
	return "", fmt.Errorf("redis: can't marshal %T (implement encoding.BinaryMarshaler)", v)
}

type signed interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64
}

type unsigned interface {
	~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr
}

func ptrInt[T signed](p *T) (string, error) {
	if p == nil {
		return "0", nil
	}
	return strconv.FormatInt(int64(*p), 10), nil
}

func ptrUint[T unsigned](p *T) (string, error) {
	if p == nil {
		return "0", nil
	}
	return strconv.FormatUint(uint64(*p), 10), nil
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
