package main

import (
	"io"

	"github.com/spf13/cobra"
)

// newRootCommand builds the tierctl command tree. Each subcommand lives in
// its own file and is added here.
func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "tierctl",
		Short: "Inspect tierflow network policy",
		// main prints the error once, on one line; usage is for --help.
		SilenceUsage:  true,
		SilenceErrors: true,
		// Environment defaults are read after parsing, never shown by
		// --help (see fromEnv). No subcommand has a hook of its own.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return fromEnv(cmd.Flags())
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	live := &liveOptions{}
	live.addFlags(root.PersistentFlags())
	root.AddCommand(newExplainCommand(live), newGetCommand(live), newFlowsCommand(live), newTraceCommand(live))
	return root
}
