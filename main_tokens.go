package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

const tokensHelp = `usage: crosstalk-mcp tokens add NAME --context-id PATTERN... --tokens-file PATH
       crosstalk-mcp tokens list --tokens-file PATH

The per-agent tokens of 'serve --http --tokens-file PATH'. add prints a new
token for NAME once and appends NAME, the token's SHA-256 and the patterns to
PATH (created with mode 0600); list prints names and patterns, never a token.

options:
  --context-id PATTERN  a context_id the token may speak for, exact or a prefix
                        ending in '*' (repeatable; add needs at least one)
  --tokens-file PATH    the tokens file
`

// runTokens runs "crosstalk-mcp tokens add|list".
func runTokens(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "add" && args[0] != "list") {
		err := errors.New("expected add or list")
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			err = flag.ErrHelp
		}
		return commandExit("tokens", tokensHelp, err, stdout, stderr)
	}
	command, rest := "tokens "+args[0], args[1:]
	var name string
	if args[0] == "add" && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		name, rest = rest[0], rest[1:]
	}
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	path := fs.String("tokens-file", "", "")
	var patterns []string
	fs.Func("context-id", "", func(v string) error {
		patterns = append(patterns, v)
		return nil
	})
	err := parseFlags(fs, rest)
	switch {
	case err != nil:
	case *path == "":
		err = errors.New("--tokens-file is required")
	case args[0] == "add" && (name == "" || len(patterns) == 0):
		err = errors.New("add needs NAME and at least one --context-id")
	}
	if err != nil {
		return commandExit(command, tokensHelp, err, stdout, stderr)
	}
	if args[0] == "list" {
		err = listTokens(*path, stdout)
	} else {
		err = addToken(*path, name, patterns, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "crosstalk-mcp %s: %v\n", command, err)
		return 1
	}
	return 0
}

// listTokens prints each agent's name and patterns.
func listTokens(path string, stdout io.Writer) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	tokens, err := parseTokens(data)
	for _, tok := range tokens {
		fmt.Fprintf(stdout, "%s %s\n", tok.name, strings.Join(tok.patterns, " "))
	}
	return err
}

// addToken makes a token of 32 random bytes (base64url, 43 characters),
// appends its line to the tokens file and prints the token once. The file
// with the line is checked as the server reads it before anything is
// written, so that add never leaves a file the server refuses.
func addToken(path, name string, patterns []string, stdout io.Writer) error {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var raw [32]byte
	rand.Read(raw[:])
	token := base64.RawURLEncoding.EncodeToString(raw[:])
	text := tokenLine(name, token, patterns)
	if len(strings.Fields(text)) != 2+len(patterns) {
		return errors.New("NAME and each --context-id must be non-empty and without blanks")
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		text = "\n" + text
	}
	if _, err := parseTokens(append(data, text...)); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		fmt.Fprintln(stdout, token)
	}
	return err
}
