// cuBLAS and cuBLASLt are loaded on first use (tensor/cuda/cublas_library.h),
// not linked: a process that has not asked for them has not mapped them,
// and asking resolves every entry point. No GPU needed.
#include "tensor/cuda/cublas_library.h"

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace mirrortrain::cuda {
namespace {

bool Mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find(library) != std::string::npos;
}

// First in this binary, before anything loads them.
TEST(CublasLibraryTest, NotMappedUntilAskedFor) {
  EXPECT_FALSE(Mapped("libcublasLt.so"));
  EXPECT_FALSE(Mapped("libcublas.so"));
}

TEST(CublasLibraryTest, LoadsEveryEntryPoint) {
  absl::StatusOr<const CublasLibrary*> library = LoadCublas();
  ASSERT_TRUE(library.ok()) << library.status();
  EXPECT_TRUE(Mapped("libcublasLt.so"));
  EXPECT_TRUE(Mapped("libcublas.so"));
  // Every member is a function pointer.
  static_assert(sizeof(CublasLibrary) % sizeof(void (*)()) == 0);
  const auto* entries = reinterpret_cast<void (*const*)()>(*library);
  for (size_t i = 0; i < sizeof(CublasLibrary) / sizeof(void (*)()); ++i) {
    EXPECT_NE(entries[i], nullptr) << "entry " << i;
  }
  EXPECT_EQ(*LoadCublas(), *library) << "loaded twice";
}

TEST(CublasLibraryTest, StatusesReadAsTheLibraryNamesThem) {
  const std::string text = CublasStatusText(CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_NE(text.find("CUBLAS_STATUS_NOT_SUPPORTED"), std::string::npos)
      << text;
}

}  // namespace
}  // namespace mirrortrain::cuda
