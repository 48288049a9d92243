// Precompiled for every test (tests/CMakeLists.txt): the libraries' set plus
// GoogleTest and the file-system headers the end-to-end tests use.
#pragma once

#include <filesystem>
#include <fstream>

#include "cmake/pch_common.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
