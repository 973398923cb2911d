module github.com/seed93a044d1/retry

go 1.25.0

require (
	github.com/stretchr/testify v1.11.1 // indirect
	golang.org/x/time v0.15.0 // indirect
)
