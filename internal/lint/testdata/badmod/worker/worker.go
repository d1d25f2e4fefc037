package worker

import _ "example.com/badmod/feedsvc"
