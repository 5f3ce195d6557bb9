package config

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// EnvPrefix starts the name of every environment variable a component
// reads its configuration from.
const EnvPrefix = "TIERFLOW_"

// valueKind is the type of a configuration value.
type valueKind int

const (
	kindString valueKind = iota
	kindBool
	kindInt
	kindDuration
)

func (k valueKind) String() string {
	switch k {
	case kindBool:
		return "bool"
	case kindInt:
		return "int"
	case kindDuration:
		return "duration"
	default:
		return "string"
	}
}

// option is one configuration value: a leaf field of a component's struct.
type option struct {
	key   string // file key path, e.g. "leaderElection.leaseName"
	flag  string // flag name without dashes
	env   string // environment variable
	usage string
	kind  valueKind
	index []int // reflect field index path from the struct root
}

var durationType = reflect.TypeOf(time.Duration(0))

// optionsOf lists the leaf fields of the struct type t, in declaration
// order. A field is a leaf unless it is a nested struct; every leaf needs a
// json, a flag and a usage tag. It panics on a malformed declaration: that
// is a programming error in this package, caught by its tests.
func optionsOf(t reflect.Type) []option {
	var out []option
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				panic(fmt.Sprintf("config: field %s.%s has no json tag", t.Name(), f.Name))
			}
			key := name
			if prefix != "" {
				key = prefix + "." + name
			}
			idx := append(append([]int(nil), index...), i)
			if f.Type.Kind() == reflect.Struct {
				walk(f.Type, key, idx)
				continue
			}
			o := option{key: key, flag: f.Tag.Get("flag"), usage: f.Tag.Get("usage"), env: envName(key), index: idx}
			switch {
			case f.Type == durationType:
				o.kind = kindDuration
			case f.Type.Kind() == reflect.String:
				o.kind = kindString
			case f.Type.Kind() == reflect.Bool:
				o.kind = kindBool
			case f.Type.Kind() == reflect.Int:
				o.kind = kindInt
			default:
				panic(fmt.Sprintf("config: field %s.%s has unsupported type %s", t.Name(), f.Name, f.Type))
			}
			if o.flag == "" || o.usage == "" {
				panic(fmt.Sprintf("config: field %s.%s needs flag and usage tags", t.Name(), f.Name))
			}
			out = append(out, o)
		}
	}
	walk(t, "", nil)
	return out
}

// envName derives the environment variable of a key: camelCase words and
// nesting dots become upper snake case after the prefix.
func envName(key string) string {
	var b strings.Builder
	b.WriteString(EnvPrefix)
	rs := []rune(key)
	for i, r := range rs {
		switch {
		case r == '.':
			b.WriteByte('_')
		case unicode.IsUpper(r):
			// A word starts at an upper-case letter after a lower-case one
			// or a digit (leaseName), or at the last capital of an acronym
			// followed by lower case (controllerCAFile: CA, File).
			if i > 0 && rs[i-1] != '.' {
				prev := rs[i-1]
				nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
				if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
					b.WriteByte('_')
				}
			}
			b.WriteRune(r)
		default:
			b.WriteRune(unicode.ToUpper(r))
		}
	}
	return b.String()
}

// convert turns a raw value from any source (a string from the
// environment or a flag, a YAML scalar decoded as JSON, a default) into the
// option's Go type. Numbers from YAML arrive as float64.
func (o option) convert(raw any) (any, error) {
	switch o.kind {
	case kindString:
		switch v := raw.(type) {
		case string:
			return v, nil
		case float64, bool:
			// YAML reads port: 80 or on: yes as non-strings; a string
			// field wants the text, and quoting is the cure.
			return nil, fmt.Errorf("must be a string (quote it)")
		}
	case kindBool:
		switch v := raw.(type) {
		case bool:
			return v, nil
		case string:
			b, err := strconv.ParseBool(strings.TrimSpace(v))
			if err != nil {
				return nil, fmt.Errorf("must be true or false")
			}
			return b, nil
		}
		return nil, fmt.Errorf("must be true or false")
	case kindInt:
		switch v := raw.(type) {
		case int:
			return v, nil
		case float64:
			if v != math.Trunc(v) || v > math.MaxInt32 || v < math.MinInt32 {
				return nil, fmt.Errorf("must be an integer")
			}
			return int(v), nil
		case string:
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return nil, fmt.Errorf("must be an integer")
			}
			return n, nil
		}
		return nil, fmt.Errorf("must be an integer")
	case kindDuration:
		switch v := raw.(type) {
		case time.Duration:
			return v, nil
		case string:
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				return nil, fmt.Errorf("must be a duration with a unit, like 500ms, 15s or 1m30s")
			}
			return d, nil
		}
		// A bare number would be nanoseconds: never what an operator means.
		return nil, fmt.Errorf("must be a duration with a unit, like 500ms, 15s or 1m30s")
	}
	return nil, fmt.Errorf("must be a string")
}

// formatValue prints a value the way an operator writes it.
func formatValue(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case time.Duration:
		return v.String()
	default:
		return fmt.Sprint(v)
	}
}
