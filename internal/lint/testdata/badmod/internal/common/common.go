package common
