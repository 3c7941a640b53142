package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/build"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// layerRule forbids files of one prefix from naming identifiers declared in
// the files that match any of the globs in to.
type layerRule struct {
	from string
	to   []string
	why  string
}

// layerRules is the package's architecture on one screen. Lowest first:
// store (which may call routing.go's pure decision), then routing, then
// tools and the audit trail (which know each other: each tool names its own
// audit details), jsonrpc serving them, observe beside jsonrpc (the two
// share the loopback guards in observe.go), and main on top, which alone
// wires the process. A rule names what a prefix may not reach.
var layerRules = []layerRule{
	{"store", []string{"jsonrpc*.go", "tools*.go", "observe*.go", "audit*.go", "main*.go", "routing_*.go"},
		"storage is the bottom layer; of routing it may call only routing.go's pure decision"},
	{"routing", []string{"jsonrpc*.go", "tools*.go", "observe*.go", "audit*.go", "main*.go"},
		"routing decides and watches; it knows no transport, tool, dashboard or command"},
	{"tools", []string{"jsonrpc_http*.go", "observe*.go", "main*.go"},
		"a tool runs the same over every transport and knows no dashboard or command"},
	{"audit", []string{"jsonrpc_http*.go", "observe*.go", "main*.go"},
		"the audit trail records; reading it for the dashboard is observe's job"},
	{"jsonrpc", []string{"main*.go"},
		"the wire layer is handed its configuration; only main reads flags and the build"},
	{"observe", []string{"jsonrpc*.go", "tools*.go", "main*.go"},
		"the dashboard reads storage and the audit trail, never a live session or its command"},
}

// layerPrefix returns the spine a file belongs to: "main" for main.go and
// main_*.go, and so on; "" for a file outside the spines, such as doc.go.
func layerPrefix(name string) string {
	spine, _, _ := strings.Cut(strings.TrimSuffix(name, ".go"), "_")
	switch spine {
	case "main", "jsonrpc", "tools", "store", "routing", "observe", "audit":
		return spine
	}
	return ""
}

// layerGOOS lists the systems whose file sets the test checks, so that every
// platform file is read at least once; the first is checked strictly.
var layerGOOS = []string{runtime.GOOS, "linux", "darwin", "freebsd", "windows"}

// layerViolations type-checks dir's non-test files once per system in
// layerGOOS and returns one line per forbidden reference, sorted.
func layerViolations(dir string, rules []layerRule) ([]string, error) {
	found := map[string]bool{}
	imp := &exportImporter{dir: dir}
	for i, goos := range layerGOOS {
		ctx := build.Default
		ctx.GOOS = goos
		fset := token.NewFileSet()
		files, err := parseLayerFiles(&ctx, fset, dir)
		if err != nil {
			return nil, err
		}
		var typeErrs []error
		conf := types.Config{Importer: imp, Error: func(err error) { typeErrs = append(typeErrs, err) }}
		info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
		pkg, _ := conf.Check("main", fset, files, info)
		// Other systems' files are checked against this system's standard
		// library, so only the first pass insists on a clean type-check.
		if i == 0 && len(typeErrs) > 0 {
			return nil, fmt.Errorf("type-check %s: %w", dir, typeErrs[0])
		}
		for id, obj := range info.Uses {
			if line := layerViolation(fset, pkg, id, obj, rules); line != "" {
				found[line] = true
			}
		}
	}
	lines := make([]string, 0, len(found))
	for line := range found {
		lines = append(lines, line)
	}
	slices.Sort(lines)
	return lines, nil
}

// parseLayerFiles parses the non-test files of dir that ctx would build.
func parseLayerFiles(ctx *build.Context, fset *token.FileSet, dir string) ([]*ast.File, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, path := range names {
		name := filepath.Base(path)
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		if ok, err := ctx.MatchFile(dir, name); err != nil || !ok {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// layerViolation describes id's use of obj if a rule forbids it, else "".
func layerViolation(fset *token.FileSet, pkg *types.Package, id *ast.Ident, obj types.Object, rules []layerRule) string {
	if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() {
		return ""
	}
	switch o := obj.(type) {
	case *types.Func:
		obj = o.Origin()
	case *types.Var:
		obj = o.Origin()
	}
	use := fset.Position(id.Pos())
	decl := filepath.Base(fset.Position(obj.Pos()).Filename)
	from := layerPrefix(filepath.Base(use.Filename))
	for _, r := range rules {
		if r.from != from {
			continue
		}
		for _, glob := range r.to {
			if ok, _ := filepath.Match(glob, decl); ok {
				return fmt.Sprintf("%s:%d: %s is declared in %s; %s names no %s: %s",
					filepath.Base(use.Filename), use.Line, id.Name, decl, r.from, glob, r.why)
			}
		}
	}
	return ""
}

// exportImporter imports packages from the export data that `go list
// -export` leaves in the build cache; it asks the go command once, offline,
// for everything dir's files import.
type exportImporter struct {
	dir     string
	exports map[string]string
	gc      types.Importer
}

// Import implements types.Importer.
func (im *exportImporter) Import(path string) (*types.Package, error) {
	if im.exports == nil {
		if err := im.list(); err != nil {
			return nil, err
		}
	}
	return im.gc.Import(path)
}

// list asks the go command for the export data of dir's dependencies.
func (im *exportImporter) list() error {
	cmd := exec.Command("go", "list", "-deps", "-export", "-f", "{{.ImportPath}}\t{{.Export}}", ".")
	cmd.Dir = im.dir
	// The module cache must already hold every dependency: the test never
	// reaches the network.
	cmd.Env = append(os.Environ(), "GOPROXY=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go list: %w: %s", err, stderr.String())
	}
	im.exports = map[string]string{}
	for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
		if path, file, ok := strings.Cut(sc.Text(), "\t"); ok && file != "" {
			im.exports[path] = file
		}
	}
	im.gc = importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file, ok := im.exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	return nil
}

// TestLayers holds the package to layerRules, with no exceptions, and every
// production file to a spine, so that none escapes the rules.
func TestLayers(t *testing.T) {
	names, _ := filepath.Glob("*.go")
	for _, name := range names {
		if !strings.HasSuffix(name, "_test.go") && name != "doc.go" && layerPrefix(name) == "" {
			t.Errorf("%s: got no spine prefix; want main, jsonrpc, tools, store, routing, observe or audit", name)
		}
	}
	lines, err := layerViolations(".", layerRules)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range lines {
		t.Error(line)
	}
}

// TestLayersCatches shows that layerViolations reports a forbidden reference
// and allows the permitted ones, on small synthetic packages.
func TestLayersCatches(t *testing.T) {
	base := map[string]string{
		"store.go":         "func stored() int { return decide() }\ntype row struct{ id int }\n",
		"routing.go":       "func decide() int { return 1 }\n",
		"routing_watch.go": "func watch() int { return stored() }\n",
		"jsonrpc.go":       "func serve() int { return watch() + stored() + row{}.id }\n",
		"main.go":          "var version = \"1\"\nfunc main() { _ = serve() }\n",
	}
	tests := []struct {
		name  string
		extra map[string]string
		want  []string
	}{
		{"allowed", nil, nil},
		{"store names jsonrpc", map[string]string{"store_x.go": "func x() int {\n\treturn serve()\n}\n"},
			[]string{"store_x.go:4: serve is declared in jsonrpc.go; store names no jsonrpc*.go"}},
		{"store names routing_", map[string]string{"store_x.go": "func x() int { return watch() }\n"},
			[]string{"store_x.go:3: watch is declared in routing_watch.go; store names no routing_*.go"}},
		{"routing names main", map[string]string{"routing_x.go": "var v = version\n"},
			[]string{"routing_x.go:3: version is declared in main.go; routing names no main*.go"}},
		{"audit names observe field", map[string]string{
			"observe_x.go": "type page struct{ title string }\n",
			"audit_x.go":   "func a(p page) string { return p.title }\n"},
			[]string{"audit_x.go:3: page is declared in observe_x.go", "audit_x.go:3: title is declared in observe_x.go"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, files := range []map[string]string{base, tt.extra} {
				for name, body := range files {
					if err := os.WriteFile(filepath.Join(dir, name), []byte("package main\n\n"+body), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			got, err := layerViolations(dir, layerRules)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d violations %q; want %d %q", len(got), got, len(tt.want), tt.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.want[i]) {
					t.Errorf("got %q; want it to start %q", got[i], tt.want[i])
				}
			}
		})
	}
}

// TestMarkdownTablesHaveHeaders checks that every table in the user docs
// starts with a header and its delimiter row: a blank line inside a table
// ends it, and Markdown shows the rows after it as plain text.
func TestMarkdownTablesHaveHeaders(t *testing.T) {
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	delimiter := regexp.MustCompile(`^\|( *:?-+:? *\|)+$`)
	for _, name := range append(files, "README.md", "testdata/golden/README.md") {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(data), "\n")
		for i, line := range lines {
			starts := strings.HasPrefix(line, "|") && (i == 0 || !strings.HasPrefix(lines[i-1], "|"))
			if starts && (i+1 == len(lines) || !delimiter.MatchString(lines[i+1])) {
				t.Errorf("%s:%d: got a table without a header and delimiter row; want one (a blank line ends a table): %.60s", name, i+1, line)
			}
		}
	}
}

// TestDocListsEveryEnvironmentVariable checks that doc.go's table of
// environment variables names every variable the program reads.
func TestDocListsEveryEnvironmentVariable(t *testing.T) {
	table := docSection(t, "# Environment variables", "")
	read := regexp.MustCompile(`(?:Getenv|LookupEnv|getenv)\("([A-Z0-9_]+)"\)|"(CROSSTALK_[A-Z0-9_]+)"`)
	for _, pf := range productionFiles(t, token.NewFileSet()) {
		for _, m := range read.FindAllStringSubmatch(string(pf.src), -1) {
			if v := m[1] + m[2]; !strings.Contains(table, "//\t"+v+" ") {
				t.Errorf("%s reads %s; want it in doc.go's environment variables", pf.name, v)
			}
		}
	}
}

// TestDocListsEveryGoroutine checks that doc.go's goroutine table names the
// function of every go statement, WaitGroup.Go and AfterFunc in the program.
func TestDocListsEveryGoroutine(t *testing.T) {
	table := docSection(t, "# Goroutines", "# Timing constants")
	fset := token.NewFileSet()
	for _, pf := range productionFiles(t, fset) {
		for _, decl := range pf.file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				starts := false
				switch n := n.(type) {
				case *ast.GoStmt:
					starts = true
				case *ast.CallExpr:
					sel, ok := n.Fun.(*ast.SelectorExpr)
					starts = ok && (sel.Sel.Name == "Go" || sel.Sel.Name == "AfterFunc")
				}
				if starts && !regexp.MustCompile(`\b`+fn.Name.Name+`\b`).MatchString(table) {
					t.Errorf("%s: %s starts a goroutine; want %s in doc.go's goroutine table", fset.Position(n.Pos()), fn.Name.Name, fn.Name.Name)
				}
				return true
			})
		}
	}
}

// TestDocListsEveryTimingConstant checks that doc.go's timing table names
// every package-level duration: a constant or variable built from time's
// units, or a field of defaultHTTPLimits set from them.
func TestDocListsEveryTimingConstant(t *testing.T) {
	table := docSection(t, "# Timing constants", "# Environment variables")
	unit := regexp.MustCompile(`\btime\.(Nanosecond|Microsecond|Millisecond|Second|Minute|Hour)\b`)
	fset := token.NewFileSet()
	for _, pf := range productionFiles(t, fset) {
		text := func(n ast.Node) string {
			return string(pf.src[fset.Position(n.Pos()).Offset:fset.Position(n.End()).Offset])
		}
		eachPackageValue(pf.file, func(id *ast.Ident, value ast.Expr) {
			if !unit.MatchString(text(value)) {
				return
			}
			if lit, ok := value.(*ast.CompositeLit); ok {
				for _, e := range lit.Elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok && unit.MatchString(text(kv.Value)) && !strings.Contains(table, text(kv.Key)+" ") {
						t.Errorf("%s: %s.%s is a duration; want it in doc.go's timing table", pf.name, id.Name, text(kv.Key))
					}
				}
			} else if !regexp.MustCompile(`\b` + id.Name + `\b`).MatchString(table) {
				t.Errorf("%s: %s is a duration; want it in doc.go's timing table", pf.name, id.Name)
			}
		})
	}
}

// eachPackageValue calls fn with each package-level constant or variable
// of file that is given a value, and that value.
func eachPackageValue(file *ast.File, fn func(id *ast.Ident, value ast.Expr)) {
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || (gen.Tok != token.CONST && gen.Tok != token.VAR) {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, id := range vs.Names {
				if i < len(vs.Values) {
					fn(id, vs.Values[i])
				}
			}
		}
	}
}

// TestDocTimingValues checks the value doc.go's timing table gives each
// package-level time.Duration, or field of one's literal, against the code:
// "writeLockWait 250 ms" must be 250 * time.Millisecond.
func TestDocTimingValues(t *testing.T) {
	table := docSection(t, "# Timing constants", "# Environment variables")
	ctx := build.Default
	fset := token.NewFileSet()
	files, err := parseLayerFiles(&ctx, fset, ".")
	if err != nil {
		t.Fatal(err)
	}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}}
	if _, err := (&types.Config{Importer: &exportImporter{dir: "."}}).Check("main", fset, files, info); err != nil {
		t.Fatal(err)
	}
	units := map[string]time.Duration{"ms": time.Millisecond, "s": time.Second, "min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}
	check := func(name string, value ast.Expr) {
		tv := info.Types[value]
		if tv.Value == nil || tv.Type.String() != "time.Duration" {
			return
		}
		ns, _ := constant.Int64Val(tv.Value)
		t.Run(name, func(t *testing.T) {
			m := regexp.MustCompile(`\b` + name + ` ([0-9.]+) (ms|s|min|h|d)\b`).FindStringSubmatch(table)
			if m == nil {
				t.Fatalf("got no %q row with a value and unit in doc.go's timing table; want one", name)
			}
			v, _ := strconv.ParseFloat(m[1], 64)
			if got, want := time.Duration(v*float64(units[m[2]])), time.Duration(ns); got != want {
				t.Errorf("doc.go's timing table gives %s as %s %s; got %v, want %v", name, m[1], m[2], got, want)
			}
		})
	}
	for _, f := range files {
		eachPackageValue(f, func(id *ast.Ident, value ast.Expr) {
			check(id.Name, value)
			if lit, ok := value.(*ast.CompositeLit); ok {
				for _, e := range lit.Elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok {
						check(fmt.Sprint(kv.Key), kv.Value)
					}
				}
			}
		})
	}
}

// TestDocListsTimingHints checks that doc.go's timing table names the
// durations the program hands to others rather than waits on itself, which
// TestDocListsEveryTimingConstant cannot see: none is a time.Duration.
func TestDocListsTimingHints(t *testing.T) {
	table := docSection(t, "# Timing constants", "# Environment variables")
	hints := []struct{ code, doc string }{
		{`{"ttlMs", `, "ttlMs "},           // 2026-07-28 cache hints
		{"retryAfter: ", "Retry-After "},   // a 429's
		{`hookEntries("`, "hook timeout "}, // the hook entries hooks install writes
	}
	files := productionFiles(t, token.NewFileSet())
	for _, h := range hints {
		t.Run(h.doc, func(t *testing.T) {
			for _, pf := range files {
				if bytes.Contains(pf.src, []byte(h.code)) && !strings.Contains(table, h.doc) {
					t.Errorf("%s holds %q; got no %q in doc.go's timing table, want one", pf.name, h.code, h.doc)
				}
			}
		})
	}
}

// docSection returns doc.go's text from the heading start up to the heading
// end ("" for the rest of the file).
func docSection(t *testing.T, start, end string) string {
	t.Helper()
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), start)
	if end != "" {
		section, _, _ = strings.Cut(section, end)
	}
	return section
}

// productionFile is one of the package's non-test files, read and parsed.
type productionFile struct {
	name string
	src  []byte
	file *ast.File
}

// productionFiles reads and parses the package's non-test files into fset.
func productionFiles(t *testing.T, fset *token.FileSet) []productionFile {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []productionFile
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, productionFile{name, src, f})
	}
	return out
}
