// Package bundle reads what a checkpoint's weights directory (a Hugging Face snapshot under
// MEDIAQUAL_BUNDLES) says about itself: where it is, which revision it holds, its size and
// digest, and how long loading it may take. It knows the snapshot format, not any model.
package bundle

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/mediaqual/mediaqual/models/spec"
)

const (
	// EnvRoot names the directory holding one snapshot per checkpoint, at the row's Bundle path.
	EnvRoot = "MEDIAQUAL_BUNDLES"
	// EnvLoadTimeout overrides every load timeout (a Go duration, e.g. 45m).
	EnvLoadTimeout = "MEDIAQUAL_LOAD_TIMEOUT"
	// RevisionFile is the documented alternative to the Hugging Face client's metadata: a
	// bundle copied without .cache/ states its commit (40 hex digits) here.
	RevisionFile = "mediaqual-revision.txt"
	// hfDownloadDir is where `hf download --local-dir` records, per file, the commit it was
	// downloaded at (huggingface_hub _local_folder.py: <path>.metadata holds the commit hash,
	// the etag and a timestamp, one a line).
	hfDownloadDir = ".cache/huggingface/download"
	// L0Marker is the file an L0 bundle (random weights, models/<family>/build_l0.py) carries.
	L0Marker = "L0-RANDOM.txt"
)

// Load-timeout policy for a row that states none: the bundle read at no less than
// MinReadBytesPerSecond (a cold network or SATA disk) plus LoadStartup for process start,
// imports, CUDA set-up and the move to the device. DefaultLoadTimeout applies where the size
// is unknown.
const (
	MinReadBytesPerSecond = 100e6
	LoadStartup           = 5 * time.Minute
	DefaultLoadTimeout    = 10 * time.Minute
)

// Dir is the row's bundle directory, "" for a row without one or with MEDIAQUAL_BUNDLES unset.
func Dir(e spec.Entry) string {
	root := os.Getenv(EnvRoot)
	if e.Bundle == "" || root == "" {
		return ""
	}
	return filepath.Join(root, e.Bundle)
}

// Missing says why the row's bundle is not there, or "" when it is (or the row needs none).
func Missing(e spec.Entry) string {
	if e.Bundle == "" {
		return ""
	}
	dir := Dir(e)
	if dir == "" {
		return fmt.Sprintf("set %s to the directory holding %s", EnvRoot, e.Bundle)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Sprintf("no bundle for %s at %s (%s=%s); put the Hugging Face snapshot there", e.ID, dir, EnvRoot, os.Getenv(EnvRoot))
	}
	return ""
}

// IsL0 reports whether the bundle holds random weights (build_l0.py's marker).
func IsL0(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, L0Marker))
	return err == nil
}

// Revision is the commit a bundle states and where it says so. Every metadata file the
// Hugging Face client left must name the same commit, and RevisionFile, when present, too:
// a bundle mixed from two revisions is no revision. It returns "" when the bundle states none.
func Revision(dir string) (commit, source string, err error) {
	// A missing bundle states nothing, but "states no revision" would send its user looking
	// for the wrong thing (seen on the H200 when the disk could not hold the bundle).
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", "", fmt.Errorf("no bundle directory at %s: set MEDIAQUAL_BUNDLES to the directory holding the row's bundle", dir)
	}
	found := map[string][]string{} // commit -> files stating it
	meta := filepath.Join(dir, filepath.FromSlash(hfDownloadDir))
	err = filepath.WalkDir(meta, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".metadata") {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		line, _ := bufio.NewReader(f).ReadString('\n')
		rel, _ := filepath.Rel(dir, p)
		found[strings.TrimSpace(line)] = append(found[strings.TrimSpace(line)], rel)
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", "", err
	}
	if b, err := os.ReadFile(filepath.Join(dir, RevisionFile)); err == nil {
		c := strings.TrimSpace(string(b))
		found[c] = append(found[c], RevisionFile)
	}
	if len(found) == 0 {
		return "", "", nil
	}
	var commits []string
	for c, files := range found {
		commits = append(commits, fmt.Sprintf("%q (%s)", c, files[0]))
		commit, source = c, files[0]
		if len(files) > 1 {
			source = fmt.Sprintf("%s and %d more", files[0], len(files)-1)
		}
	}
	sort.Strings(commits)
	if len(found) > 1 {
		return "", "", fmt.Errorf("bundle %s states %d revisions: %s", dir, len(found), strings.Join(commits, ", "))
	}
	if !IsCommit(commit) {
		return "", "", fmt.Errorf("bundle %s states revision %q (%s), which is not a 40-hex commit", dir, commit, source)
	}
	return commit, source, nil
}

// IsCommit reports whether s is a full git commit hash.
func IsCommit(s string) bool { return len(s) == 40 && isHex(s) }

func isHex(s string) bool {
	return s != "" && strings.Trim(strings.ToLower(s), "0123456789abcdef") == ""
}

// Matches reports whether a bundle's commit is the row's revision: equal to a full one, or
// starting with a short one (the seeds give some revisions as 8-character hashes).
func Matches(row, commit string) bool {
	return isHex(row) && len(row) >= 7 && strings.HasPrefix(strings.ToLower(commit), strings.ToLower(row))
}

// notServed are paths inside a bundle that are not weights: the client's bookkeeping (lock
// files, timestamps), reference outputs and the revision file. The digest leaves them out so
// two downloads of one revision hash alike.
func notServed(rel string) bool {
	rel = filepath.ToSlash(rel)
	return strings.HasPrefix(rel, ".cache/") || strings.HasPrefix(rel, spec.ReferenceOutputsDir+"/") || rel == RevisionFile
}

// Digest identifies exactly what is served: sha256 over every served file's relative path and
// content, in path order. It returns the digest, the file count and the bytes read.
func Digest(dir string) (sum string, files int, size int64, err error) {
	paths, err := servedFiles(dir)
	if err != nil {
		return "", 0, 0, err
	}
	h := sha256.New()
	for _, rel := range paths {
		f, err := os.Open(filepath.Join(dir, rel))
		if err != nil {
			return "", 0, 0, err
		}
		fmt.Fprintf(h, "%s\x00", rel)
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", 0, 0, err
		}
		size += n
	}
	return hex.EncodeToString(h.Sum(nil)), len(paths), size, nil
}

// Size is the bytes a load reads: every served file.
func Size(dir string) (int64, error) {
	paths, err := servedFiles(dir)
	var n int64
	for _, rel := range paths {
		if st, err := os.Stat(filepath.Join(dir, rel)); err == nil {
			n += st.Size()
		}
	}
	return n, err
}

func servedFiles(dir string) ([]string, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() && rel != "." && notServed(rel+"/") {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() && !notServed(rel) {
			paths = append(paths, rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	sort.Strings(paths)
	return paths, nil
}

// LoadTimeout is how long the row's weights may take to load, and where that figure comes
// from: EnvLoadTimeout, else the row's LoadTimeout, else the bundle's size at
// MinReadBytesPerSecond plus LoadStartup, else DefaultLoadTimeout.
func LoadTimeout(e spec.Entry) (time.Duration, string, error) {
	if v := os.Getenv(EnvLoadTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, "", fmt.Errorf("%s=%q is not a positive Go duration (e.g. 45m)", EnvLoadTimeout, v)
		}
		return d, EnvLoadTimeout, nil
	}
	if e.LoadTimeout > 0 {
		return e.LoadTimeout, "the row's LoadTimeout", nil
	}
	if dir := Dir(e); dir != "" {
		if n, err := Size(dir); err == nil && n > 0 {
			d := LoadStartup + time.Duration(float64(n)/MinReadBytesPerSecond*float64(time.Second))
			return d.Round(time.Second), fmt.Sprintf("%.1f GB at %.0f MB/s plus %s", float64(n)/1e9, MinReadBytesPerSecond/1e6, LoadStartup), nil
		}
	}
	return DefaultLoadTimeout, "the default", nil
}

// RaiseHint says how to give a load more time.
func RaiseHint(d time.Duration, from string) string {
	return fmt.Sprintf("load timeout %s (from %s); raise it with %s=<duration>, e.g. %s=%s", d, from, EnvLoadTimeout, EnvLoadTimeout, 2*d)
}
