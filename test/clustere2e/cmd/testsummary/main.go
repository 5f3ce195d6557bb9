// Command testsummary reads `go test -json` on stdin and prints one line
// per finished test case (a leaf of the test tree), the output of each
// failed case, and last the tally `N passed, M failed, K skipped`. It
// exits 1 when a case failed or the run broke (a package failed without a
// failed case, e.g. a build error or TestMain's), so `make e2e-cluster`
// reports the suite's verdict.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	outputs := map[string]*strings.Builder{}
	parents := map[string]bool{}
	var finished []string
	outcome := map[string]string{}
	var pkgOutput strings.Builder
	pkgFailed := false
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			fmt.Println(sc.Text()) // not JSON: build output
			continue
		}
		if ev.Test == "" {
			switch ev.Action {
			case "output":
				pkgOutput.WriteString(ev.Output)
				if strings.HasPrefix(ev.Output, "e2e-cluster:") {
					fmt.Print(ev.Output) // TestMain's progress
				}
			case "fail":
				pkgFailed = true
			}
			continue
		}
		if i := strings.LastIndex(ev.Test, "/"); i > 0 {
			parents[ev.Test[:i]] = true
		}
		switch ev.Action {
		case "output":
			b := outputs[ev.Test]
			if b == nil {
				b = &strings.Builder{}
				outputs[ev.Test] = b
			}
			b.WriteString(ev.Output)
		case "pass", "fail", "skip":
			outcome[ev.Test] = ev.Action
			finished = append(finished, ev.Test)
			if !parents[ev.Test] {
				fmt.Printf("%-4s %s (%v)\n", strings.ToUpper(ev.Action), ev.Test, time.Duration(ev.Elapsed*float64(time.Second)).Round(time.Second))
			}
		}
	}
	var passed, failed, skipped int
	var failures []string
	for _, name := range finished {
		if parents[name] {
			if outcome[name] == "fail" && !childFailed(name, outcome) {
				failed++ // failed itself, outside its subtests
				failures = append(failures, name)
			}
			continue
		}
		switch outcome[name] {
		case "pass":
			passed++
		case "skip":
			skipped++
		default:
			failed++
			failures = append(failures, name)
		}
	}
	for _, name := range failures {
		fmt.Printf("\n--- FAIL %s\n%s", name, tail(outputs[name], 40))
	}
	broken := pkgFailed && failed == 0
	if broken {
		fmt.Printf("\nthe run failed outside any test case:\n%s", tailString(pkgOutput.String(), 40))
		failed++
	}
	fmt.Printf("\n%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if failed > 0 {
		os.Exit(1)
	}
}

func childFailed(parent string, outcome map[string]string) bool {
	for name, o := range outcome {
		if o == "fail" && strings.HasPrefix(name, parent+"/") {
			return true
		}
	}
	return false
}

func tail(b *strings.Builder, n int) string {
	if b == nil {
		return ""
	}
	return tailString(b.String(), n)
}

func tailString(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}
