package luastore

import "slices"

// Hashes: HSET, HGET, HMGET, HDEL, HGETALL. A hash keeps its fields in the
// order they were added, which is the order a small Redis hash (a
// listpack) replies them in.

type hash struct {
	fields []string
	values map[string]string
}

func newHash() *hash { return &hash{values: map[string]string{}} }

func (h *hash) len() int { return len(h.fields) }

// set sets field to value and reports whether the field is new.
func (h *hash) set(field, value string) bool {
	_, ok := h.values[field]
	h.values[field] = value
	if !ok {
		h.fields = append(h.fields, field)
	}
	return !ok
}

// del deletes field and reports whether it was there.
func (h *hash) del(field string) bool {
	if _, ok := h.values[field]; !ok {
		return false
	}
	delete(h.values, field)
	h.fields = slices.DeleteFunc(h.fields, func(f string) bool { return f == field })
	return true
}

func cmdHSet(s *Store, args []string) any {
	if len(args)%2 != 0 {
		return arityError(args[0])
	}
	e, err := s.lookupKind(args[1], kindHash)
	if err != nil {
		return err
	}
	if e == nil {
		e = s.create(args[1], kindHash)
	}
	n := int64(0)
	for i := 2; i < len(args); i += 2 {
		if e.hash.set(args[i], args[i+1]) {
			n++
		}
	}
	return n
}

func cmdHGet(s *Store, args []string) any {
	e, err := s.lookupKind(args[1], kindHash)
	if err != nil {
		return err
	}
	if e == nil {
		return nil
	}
	if v, ok := e.hash.values[args[2]]; ok {
		return v
	}
	return nil
}

func cmdHMGet(s *Store, args []string) any {
	e, err := s.lookupKind(args[1], kindHash)
	if err != nil {
		return err
	}
	out := make([]any, len(args)-2)
	for i, f := range args[2:] {
		if e == nil {
			continue
		}
		if v, ok := e.hash.values[f]; ok {
			out[i] = v
		}
	}
	return out
}

func cmdHDel(s *Store, args []string) any {
	e, err := s.lookupKind(args[1], kindHash)
	if err != nil {
		return err
	}
	if e == nil {
		return int64(0)
	}
	n := int64(0)
	for _, f := range args[2:] {
		if e.hash.del(f) {
			n++
		}
	}
	s.dropIfEmpty(args[1], e)
	return n
}

func cmdHGetAll(s *Store, args []string) any {
	e, err := s.lookupKind(args[1], kindHash)
	if err != nil {
		return err
	}
	out := []any{}
	if e == nil {
		return out
	}
	for _, f := range e.hash.fields {
		out = append(out, f, e.hash.values[f])
	}
	return out
}
