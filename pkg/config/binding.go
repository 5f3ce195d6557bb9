package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"sigs.k8s.io/yaml"
)

// ConfigFlag is the flag naming the YAML configuration file.
const ConfigFlag = "config"

// Binding ties a component's configuration struct T to a flag set, the
// environment and a configuration file. Create it with BindController,
// BindAgent or Bind before the flags are parsed, call Load after.
type Binding[T any] struct {
	fs       *pflag.FlagSet
	opts     []option
	defaults T
	validate func(*T) error
	// defaultOrigin names where a default came from when it is not a
	// constant (the agent's node name comes from NODE_NAME).
	defaultOrigin map[string]string
}

// Bind registers on fs one flag per field of T, with the values of
// defaults as flag defaults, plus --config. validate (may be nil) runs on
// the merged result; when it returns a *FieldError, Load adds where the
// value came from.
func Bind[T any](fs *pflag.FlagSet, defaults T, validate func(*T) error) *Binding[T] {
	b := &Binding[T]{fs: fs, opts: optionsOf(reflect.TypeOf(defaults)), defaults: defaults, validate: validate}
	fs.String(ConfigFlag, "", "YAML configuration file; TIERFLOW_* environment variables and flags override its keys")
	dv := reflect.ValueOf(defaults)
	for _, o := range b.opts {
		usage := fmt.Sprintf("%s [env %s, file key %s]", o.usage, o.env, o.key)
		def := dv.FieldByIndex(o.index)
		switch o.kind {
		case kindString:
			fs.String(o.flag, def.String(), usage)
		case kindBool:
			fs.Bool(o.flag, def.Bool(), usage)
		case kindInt:
			fs.Int(o.flag, int(def.Int()), usage)
		case kindDuration:
			fs.Duration(o.flag, time.Duration(def.Int()), usage)
		}
	}
	return b
}

// BindController binds the controller's configuration to cmd's flags.
func BindController(cmd *cobra.Command) *Binding[Controller] {
	b := Bind(cmd.Flags(), DefaultController(), (*Controller).Validate)
	b.defaultOrigin = map[string]string{"identity": "env " + PodNameEnv + " or the hostname", "advertiseAddresses": "env " + PodIPsEnv}
	return b
}

// BindAgent binds the agent's configuration to cmd's flags. The node name
// defaults to the NODE_NAME environment variable (the Downward API sets it
// in the DaemonSet).
func BindAgent(cmd *cobra.Command) *Binding[Agent] {
	b := Bind(cmd.Flags(), DefaultAgent(), (*Agent).Validate)
	b.defaultOrigin = map[string]string{"nodeName": "env " + NodeNameEnv}
	return b
}

// Load merges defaults, the --config file, the environment and the flags
// that were set, converts every value to its type and validates the
// result. Errors are one line.
func (b *Binding[T]) Load() (*T, error) {
	path, _ := b.fs.GetString(ConfigFlag)
	var file map[string]any
	if path != "" {
		var err error
		if file, err = b.readFile(path); err != nil {
			return nil, err
		}
	}

	v := viper.New()
	dv := reflect.ValueOf(b.defaults)
	for _, o := range b.opts {
		v.SetDefault(o.key, dv.FieldByIndex(o.index).Interface())
		if err := v.BindEnv(o.key, o.env); err != nil {
			return nil, fmt.Errorf("config: %s: %w", o.key, err)
		}
		if f := b.fs.Lookup(o.flag); f != nil && f.Changed {
			if err := v.BindPFlag(o.key, f); err != nil {
				return nil, fmt.Errorf("config: %s: %w", o.key, err)
			}
		}
	}
	if file != nil {
		// viper lowercases the keys of the map it is given, in place; the
		// original stays intact for origin().
		if err := v.MergeConfigMap(deepCopy(file)); err != nil {
			return nil, fmt.Errorf("config: %s: %w", path, err)
		}
	}

	out := reflect.New(reflect.TypeOf(b.defaults)).Elem()
	out.Set(dv)
	for _, o := range b.opts {
		raw := v.Get(o.key)
		val, err := o.convert(raw)
		if err != nil {
			return nil, fmt.Errorf("config: invalid %s %s (%s): %v", o.key, formatRaw(raw), b.origin(o, path, file), err)
		}
		out.FieldByIndex(o.index).Set(reflect.ValueOf(val).Convert(out.FieldByIndex(o.index).Type()))
	}
	cfg := out.Addr().Interface().(*T)
	if b.validate != nil {
		if err := b.validate(cfg); err != nil {
			var fe *FieldError
			if errors.As(err, &fe) {
				for _, o := range b.opts {
					if o.key == fe.Key {
						fe.Origin = b.origin(o, path, file)
					}
				}
			}
			return nil, err
		}
	}
	return cfg, nil
}

// readFile reads the YAML file and rejects keys that are not fields, so
// that a misspelt key is an error rather than a silently ignored setting.
func (b *Binding[T]) readFile(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: reading %s: %v", path, err)
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("config: %s is not valid YAML: %s", path, oneLine(err.Error()))
	}
	if doc == nil {
		return map[string]any{}, nil // an empty file sets nothing
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("config: %s must hold a YAML mapping of keys to values", path)
	}
	known := map[string]bool{}
	sections := map[string]bool{}
	for _, o := range b.opts {
		known[o.key] = true
		for p := o.key; strings.Contains(p, "."); {
			p = p[:strings.LastIndex(p, ".")]
			sections[p] = true
		}
	}
	var check func(prefix string, m map[string]any) error
	check = func(prefix string, m map[string]any) error {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			full := k
			if prefix != "" {
				full = prefix + "." + k
			}
			val := m[k]
			switch {
			case val == nil:
				delete(m, k) // "key:" with no value: absent
			case sections[full]:
				sub, ok := val.(map[string]any)
				if !ok {
					return fmt.Errorf("config: key %s in %s must be a mapping", full, path)
				}
				if err := check(full, sub); err != nil {
					return err
				}
			case known[full]:
				if _, isMap := val.(map[string]any); isMap {
					return fmt.Errorf("config: key %s in %s must be a single value, not a mapping", full, path)
				}
				if _, isList := val.([]any); isList {
					return fmt.Errorf("config: key %s in %s must be a single value, not a list", full, path)
				}
			default:
				return fmt.Errorf("config: unknown key %s in %s (keys are case-sensitive; see --help for the valid ones)", full, path)
			}
		}
		return nil
	}
	if err := check("", m); err != nil {
		return nil, err
	}
	return m, nil
}

// origin says which source the merged value of o came from, for error
// messages. It mirrors the precedence Load applies.
func (b *Binding[T]) origin(o option, path string, file map[string]any) string {
	if f := b.fs.Lookup(o.flag); f != nil && f.Changed {
		return "from flag --" + o.flag
	}
	if v, ok := os.LookupEnv(o.env); ok && v != "" {
		return "from env " + o.env
	}
	if file != nil && fileHas(file, o.key) {
		return "from key " + o.key + " in " + path
	}
	if d, ok := b.defaultOrigin[o.key]; ok {
		return "default, from " + d
	}
	return "default"
}

func fileHas(m map[string]any, key string) bool {
	parts := strings.Split(key, ".")
	for i, p := range parts {
		v, ok := m[p]
		if !ok {
			return false
		}
		if i == len(parts)-1 {
			return true
		}
		if m, ok = v.(map[string]any); !ok {
			return false
		}
	}
	return false
}

func deepCopy(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			v = deepCopy(sub)
		}
		out[k] = v
	}
	return out
}

func formatRaw(raw any) string {
	if s, ok := raw.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprint(raw)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// FieldError is a configuration value that is well-typed but not
// acceptable.
type FieldError struct {
	Key    string // file key path
	Value  any
	Reason string // what is accepted
	// Origin is where the value came from ("from flag --x", "default",
	// ...); set by Load.
	Origin string
}

func (e *FieldError) Error() string {
	origin := ""
	if e.Origin != "" {
		origin = " (" + e.Origin + ")"
	}
	return fmt.Sprintf("config: invalid %s %s%s: %s", e.Key, formatValue(e.Value), origin, e.Reason)
}
