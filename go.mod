module github.com/sandbash/sandbash

go 1.25.0

require golang.org/x/sys v0.46.0
