// Package config loads the configuration of tierflow-controller and
// tierflow-agent.
//
// Each component has one typed struct (Controller, Agent) whose fields are
// declared once, with their YAML file key (json tag), command-line flag
// (flag tag) and help text (usage tag). From that declaration a Binding
// registers the flags on a cobra command, derives the environment variable
// of every key (TIERFLOW_ followed by the key in upper snake case, nested
// keys joined with "_": leaderElection.leaseName is
// TIERFLOW_LEADER_ELECTION_LEASE_NAME) and merges the sources with
// github.com/spf13/viper in this order, highest first:
//
//	command-line flags > TIERFLOW_* environment > the --config YAML file > defaults
//
// Defaults are printed by --help. An environment variable set to the empty
// string counts as unset; a key with an empty (null) value in the file
// counts as absent.
//
// Loading is strict, so that a typo never silently runs with a default:
// a file key that is not a field (matched case-sensitively), a value of the
// wrong type, a duration without a unit, and every value that fails the
// component's Validate (bad datapath type, malformed address, unknown log
// level, negative or inconsistent durations, ...) stop the component at
// start with one line naming the key, the value, where it came from and
// what is accepted.
//
// A main binds its command in a few lines:
//
//	cmd := &cobra.Command{Use: "tierflow-agent", SilenceUsage: true}
//	cfg := config.BindAgent(cmd)
//	cmd.RunE = func(*cobra.Command, []string) error {
//		c, err := cfg.Load()
//		if err != nil {
//			return err
//		}
//		return run(c)
//	}
//
// Reference renders the table of every key (file key, flag, environment
// variable, default, meaning) that docs/configuration.md in this package
// is generated from.
package config
