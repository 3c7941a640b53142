// Command pack writes the release files scripts/release.sh asks for, the same
// bytes on every machine: .tar.gz and .zip archives whose entries are sorted,
// owned by 0:0 and stamped with one fixed time; the MCPB bundle's
// manifest.json from its template; SHA256SUMS; and the registry's server.json
// with each bundle's fileSha256. It is its own module, so nothing here enters
// the product's build or its go.mod, and it uses the standard library only.
//
// Usage:
//
//	pack tgz -o OUT -mtime EPOCH [-prefix DIR] PATH[=NAME]...
//	pack zip -o OUT -mtime EPOCH [-prefix DIR] PATH[=NAME]...
//	pack manifest -template FILE -version V -goos OS -binary NAME -o OUT
//	pack sums -o OUT PATH...
//	pack serverjson -template FILE -version V -dist DIR -o OUT
package main

import (
	"archive/tar"
	"archive/zip"
	"compress/flate"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: pack tgz|zip|manifest|sums|serverjson [FLAGS] [ARGS]")
		os.Exit(2)
	}
	commands := map[string]func([]string) error{
		"tgz": runArchive(writeTarGz), "zip": runArchive(writeZip),
		"manifest": runManifest, "sums": runSums, "serverjson": runServerJSON,
	}
	command, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "pack: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
	if err := command(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "pack %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// entry is one file of an archive: where it is read from, its name inside
// the archive and the mode it is given there.
type entry struct {
	src, name string
	mode      os.FileMode
}

// archiveWriter writes the sorted entries, all stamped with mtime, to w.
type archiveWriter func(w io.Writer, entries []entry, mtime time.Time) error

// runArchive parses the flags an archive command shares and writes the
// archive through write.
func runArchive(write archiveWriter) func([]string) error {
	return func(args []string) error {
		fs := flag.NewFlagSet("archive", flag.ContinueOnError)
		out := fs.String("o", "", "archive to write")
		epoch := fs.Int64("mtime", -1, "modification time of every entry, in Unix seconds")
		prefix := fs.String("prefix", "", "directory every entry is placed under")
		if err := fs.Parse(args); err != nil {
			return err
		}
		if *out == "" || *epoch < 0 || fs.NArg() == 0 {
			return errors.New("need -o, -mtime and at least one file")
		}
		entries, err := archiveEntries(fs.Args(), *prefix)
		if err != nil {
			return err
		}
		return writeFile(*out, func(w io.Writer) error {
			return write(w, entries, time.Unix(*epoch, 0).UTC())
		})
	}
}

// archiveEntries turns PATH[=NAME] arguments into entries sorted by name.
// The mode is 0755 for a file with any execute bit and 0644 otherwise, so
// the umask of the machine that built the release does not show.
func archiveEntries(args []string, prefix string) ([]entry, error) {
	var entries []entry
	for _, arg := range args {
		src, name, ok := strings.Cut(arg, "=")
		if !ok {
			name = filepath.Base(src)
		}
		info, err := os.Stat(src)
		if err != nil {
			return nil, fmt.Errorf("stat archive member: %w", err)
		}
		if !info.Mode().IsRegular() {
			return nil, fmt.Errorf("%s is not a regular file", src)
		}
		mode := os.FileMode(0o644)
		if info.Mode()&0o111 != 0 {
			mode = 0o755
		}
		entries = append(entries, entry{src: src, name: prefix + name, mode: mode})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	return entries, nil
}

// writeTarGz writes a gzip-compressed ustar archive. The gzip header carries
// no name and no time (Go writes MTIME 0 and OS 255 when they are unset).
func writeTarGz(w io.Writer, entries []entry, mtime time.Time) error {
	gz, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	for _, dir := range parentDirs(entries) {
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: mtime, Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("write tar header %s: %w", dir, err)
		}
	}
	for _, e := range entries {
		data, err := os.ReadFile(e.src)
		if err != nil {
			return fmt.Errorf("read archive member: %w", err)
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: int64(e.mode), Size: int64(len(data)),
			ModTime: mtime, Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("write tar header %s: %w", e.name, err)
		}
		if _, err := tw.Write(data); err != nil {
			return fmt.Errorf("write tar member %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("finish tar: %w", err)
	}
	return gz.Close()
}

// writeZip writes a deflated zip archive. Modified is in UTC, so the MS-DOS
// time fields and the extended timestamp agree on every machine.
func writeZip(w io.Writer, entries []entry, mtime time.Time) error {
	zw := zip.NewWriter(w)
	zw.RegisterCompressor(zip.Deflate, func(out io.Writer) (io.WriteCloser, error) {
		return flate.NewWriter(out, flate.BestCompression)
	})
	for _, dir := range parentDirs(entries) {
		hdr := &zip.FileHeader{Name: dir, Method: zip.Store, Modified: mtime}
		hdr.SetMode(os.ModeDir | 0o755)
		if _, err := zw.CreateHeader(hdr); err != nil {
			return fmt.Errorf("write zip directory %s: %w", dir, err)
		}
	}
	for _, e := range entries {
		data, err := os.ReadFile(e.src)
		if err != nil {
			return fmt.Errorf("read archive member: %w", err)
		}
		hdr := &zip.FileHeader{Name: e.name, Method: zip.Deflate, Modified: mtime}
		hdr.SetMode(e.mode)
		fw, err := zw.CreateHeader(hdr)
		if err != nil {
			return fmt.Errorf("write zip header %s: %w", e.name, err)
		}
		if _, err := fw.Write(data); err != nil {
			return fmt.Errorf("write zip member %s: %w", e.name, err)
		}
	}
	return zw.Close()
}

// parentDirs lists, sorted, every directory the entries' names sit in, each
// ending in a slash, so that an archive extracts with directories whose mode
// and time are fixed too.
func parentDirs(entries []entry) []string {
	seen := map[string]bool{}
	for _, e := range entries {
		for dir := filepath.ToSlash(filepath.Dir(e.name)); dir != "." && dir != "/"; dir = filepath.ToSlash(filepath.Dir(dir)) {
			seen[dir+"/"] = true
		}
	}
	dirs := make([]string, 0, len(seen))
	for dir := range seen {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	return dirs
}

// runManifest writes the MCPB manifest for one platform: the template with
// @VERSION@, @PLATFORM@ (MCPB's darwin, linux or win32) and @BINARY@ (the
// executable's file name in the bundle) replaced.
func runManifest(args []string) error {
	fs := flag.NewFlagSet("manifest", flag.ContinueOnError)
	tmpl := fs.String("template", "", "manifest template")
	version := fs.String("version", "", "release version")
	goos := fs.String("goos", "", "GOOS of the bundled binary")
	binary := fs.String("binary", "", "file name of the binary in the bundle")
	out := fs.String("o", "", "manifest to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	platform, ok := map[string]string{"darwin": "darwin", "linux": "linux", "windows": "win32"}[*goos]
	if !ok {
		return fmt.Errorf("MCPB has no platform for GOOS %q", *goos)
	}
	text, err := os.ReadFile(*tmpl)
	if err != nil {
		return fmt.Errorf("read manifest template: %w", err)
	}
	filled := strings.NewReplacer("@VERSION@", *version, "@PLATFORM@", platform, "@BINARY@", *binary).Replace(string(text))
	if left := placeholderRE.FindString(filled); left != "" {
		return fmt.Errorf("manifest template has a placeholder pack does not fill: %s", left)
	}
	return writeFile(*out, func(w io.Writer) error {
		_, err := io.WriteString(w, filled)
		return err
	})
}

// placeholderRE finds a template placeholder left unfilled.
var placeholderRE = regexp.MustCompile(`@[A-Z_]+@`)

// runSums writes SHA256SUMS in sha256sum's format (two spaces, base name),
// sorted by name, so `sha256sum -c SHA256SUMS` checks it in the directory.
func runSums(args []string) error {
	fs := flag.NewFlagSet("sums", flag.ContinueOnError)
	out := fs.String("o", "", "file to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	paths := append([]string(nil), fs.Args()...)
	sort.Slice(paths, func(i, j int) bool { return filepath.Base(paths[i]) < filepath.Base(paths[j]) })
	var b strings.Builder
	for _, p := range paths {
		sum, err := fileSHA256(p)
		if err != nil {
			return err
		}
		b.WriteString(sum + "  " + filepath.Base(p) + "\n")
	}
	return writeFile(*out, func(w io.Writer) error {
		_, err := io.WriteString(w, b.String())
		return err
	})
}

// fileSHA256 returns the hex SHA-256 of a file's contents.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("open for checksum: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read for checksum: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeFile writes a file through fill, removing it again if fill fails.
func writeFile(path string, fill func(io.Writer) error) error {
	if path == "" {
		return errors.New("need -o")
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create output: %w", err)
	}
	if err := fill(f); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return fmt.Errorf("close output: %w", err)
	}
	return nil
}
