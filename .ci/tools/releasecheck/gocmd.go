package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// goCommand runs one go binary with an environment of its own.
type goCommand struct {
	bin   string
	env   []string // added to this process's environment; a later entry wins
	netns []string // a command prefix that runs it without network; nil for none
}

// with returns c with more environment.
func (c goCommand) with(env ...string) goCommand {
	c.env = append(slices.Clip(c.env), env...)
	return c
}

func (c goCommand) command(dir string, args ...string) *exec.Cmd {
	argv := append(slices.Clip(c.netns), c.bin)
	argv = append(argv, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), c.env...)
	return cmd
}

// run runs go with args in dir; its error holds what go printed.
func (c goCommand) run(dir string, args ...string) error {
	out, err := c.command(dir, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, tail(out, 40))
	}
	return nil
}

// output runs go with args in dir and returns its standard output.
func (c goCommand) output(dir string, args ...string) (string, error) {
	cmd := c.command(dir, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, tail(stderr.Bytes(), 40))
	}
	return strings.TrimSpace(string(out)), nil
}

// tail returns the last n lines of out.
func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// toolchain returns the go command that builds a module whose go line is
// goVer: the go on PATH, or the newer toolchain it switches to (and
// downloads, if need be) under GOTOOLCHAIN's rules. It is pinned with
// GOTOOLCHAIN=local, so that nothing later tries to fetch one.
func toolchain(dir, goVer string) (goCommand, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return goCommand{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module toolchain\n\ngo "+goVer+"\n"), 0o644); err != nil {
		return goCommand{}, err
	}
	root, err := goCommand{bin: "go", env: []string{"GOWORK=off"}}.output(dir, "env", "GOROOT")
	if err != nil {
		return goCommand{}, err
	}
	return goCommand{bin: filepath.Join(root, "bin", "go"), env: []string{"GOTOOLCHAIN=local"}}, nil
}

// networkNamespace returns a command prefix that runs a command in a new
// network namespace, which has no interface but a loopback that is down:
// as root, unshare -n; otherwise in a user namespace too. nil if neither can
// be made here (a container that forbids them).
func networkNamespace() []string {
	for _, prefix := range [][]string{{"unshare", "-n", "--"}, {"unshare", "-r", "-n", "--"}} {
		if exec.Command(prefix[0], append(prefix[1:], "true")...).Run() == nil {
			return prefix
		}
	}
	return nil
}
