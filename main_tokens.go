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

Manage the per-agent bearer tokens of 'serve --http --tokens-file PATH'.

add prints a new random token for the agent NAME once, on stdout, and appends
NAME, the token's SHA-256 and the patterns to PATH (created with mode 0600).
The file never holds the token itself: give it to the agent now. A running
server picks the line up within seconds.

list prints each agent's NAME and patterns, never a token.

options:
  --context-id PATTERN  a context_id the token may speak for, exact or a prefix
                        ending in '*' (repeatable; at least one)
  --tokens-file PATH    the tokens file
`

// tokensFileHeader starts a tokens file that add creates.
const tokensFileHeader = `# crosstalk-mcp tokens: NAME sha256:HEX-OF-TOKEN CONTEXT_ID_PATTERN...
# Delete a line to revoke its token; 'crosstalk-mcp tokens add' adds one.
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
	case args[0] == "list" && len(patterns) > 0:
		err = errors.New("list takes no --context-id")
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

// readTokensFile reads and parses the tokens file at path; a missing file
// lists none.
func readTokensFile(path string) ([]byte, []*agentToken, error) {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	tokens, err := parseTokens(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, tokens, nil
}

// listTokens prints each agent's name and patterns.
func listTokens(path string, stdout io.Writer) error {
	_, tokens, err := readTokensFile(path)
	for _, tok := range tokens {
		fmt.Fprintf(stdout, "%s %s\n", tok.name, strings.Join(tok.patterns, " "))
	}
	return err
}

// addToken makes a token of 32 random bytes (base64url, 43 characters),
// appends its line to the tokens file and prints the token once. The line
// is checked as the server reads it, and against the names already there,
// before anything is written, so that add never leaves a file the server
// refuses.
func addToken(path, name string, patterns []string, stdout io.Writer) error {
	data, tokens, err := readTokensFile(path)
	if err != nil {
		return err
	}
	var raw [32]byte
	rand.Read(raw[:])
	token := base64.RawURLEncoding.EncodeToString(raw[:])
	text := tokenLine(name, token, patterns)
	fields := strings.Fields(text)
	if len(fields) != 2+len(patterns) {
		return errors.New("NAME and each --context-id must be non-empty and without blanks")
	}
	if _, err := parseTokenLine(fields); err != nil {
		return err
	}
	for _, t := range tokens {
		if t.name == name {
			return fmt.Errorf("%s already has a token; delete its line first to replace it", name)
		}
	}
	if data == nil {
		text = tokensFileHeader + text
	} else if len(data) > 0 && data[len(data)-1] != '\n' {
		text = "\n" + text
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, token)
	return nil
}
