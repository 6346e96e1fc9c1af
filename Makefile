# The commands of the README:
#   make demo            set up, build, and train the quickstart (convnet on real Fashion-MNIST)
#   make test            set up, build, and run the whole test suite
#   make test-sanitize   the same suite built with AddressSanitizer + UndefinedBehaviorSanitizer
#                        (CPU configuration, in build-sanitize/)
BUILD ?= build
SANITIZE_BUILD ?= build-sanitize
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
SANITIZE_FLAGS = -DBRRR_CUDA=OFF -DBRRR_SANITIZE=address,undefined -DBRRR_BUILD_BENCH=OFF \
                 -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g"
# libtorch allocates for the process lifetime (leak reports would be its, not brrr's); a
# sanitizer finding aborts the test that made it; an allocation larger than the machine fails as it
# does without the sanitizer (malloc returns null, libtorch raises its error), which a test checks.
SANITIZE_ENV = ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:detect_odr_violation=0:allocator_may_return_null=1 \
               UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

.PHONY: demo test test-sanitize build setup configure clean

demo: build
	./$(BUILD)/trainer --config configs/quickstart.yaml

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-sanitize: setup
	@if [ ! -f $(SANITIZE_BUILD)/build.ninja ]; then cmake -S . -B $(SANITIZE_BUILD) -G Ninja $(SANITIZE_FLAGS); fi
	cmake --build $(SANITIZE_BUILD) -j $(JOBS)
	cd $(SANITIZE_BUILD) && $(SANITIZE_ENV) ctest --output-on-failure -j $(JOBS) -LE install

build: configure
	cmake --build $(BUILD) -j $(JOBS)

configure: setup
	@if [ ! -f $(BUILD)/build.ninja ]; then cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS); fi

setup:
	bash scripts/setup.sh

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD)
