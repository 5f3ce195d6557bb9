package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	if err := newRootCommand(os.Stdout, os.Stderr).Execute(); err != nil {
		// One line, so scripts can show it as is.
		fmt.Fprintln(os.Stderr, "tierctl: "+strings.ReplaceAll(err.Error(), "\n", "; "))
		os.Exit(1)
	}
}
